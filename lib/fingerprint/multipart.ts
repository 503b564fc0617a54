import { createHash } from 'node:crypto';
import { canonicalizeValue, type JsonLimits } from './canonical-json.js';
import { UnkeptUploadError } from './unseen-body.js';

/**
 * Multipart bodies in the fingerprint. The raw bytes cannot be hashed: each attempt of a
 * client draws a new boundary, so an honest retry would differ from its first attempt. The
 * fingerprint is taken from the parsed parts instead, after the upload parser ran (multer on
 * Express, `@fastify/multipart` with `attachFieldsToBody` on Fastify): the text fields, and for
 * each file its field name, file name, media type, length and SHA-256.
 */

/** One uploaded file, as the fingerprint sees it. */
export interface UploadedFilePart {
  field: string;
  /** The client's file name; null where the parser dropped it (`attachFieldsToBody: 'keyValues'`). */
  filename: string | null;
  mimetype: string | null;
  content: Buffer;
}

/** A parsed multipart body: the text fields as the parser built them, and the files. */
export interface MultipartParts {
  fields: Record<string, unknown>;
  files: UploadedFilePart[];
}

/** Tells a multipart body apart from any JSON text (which never starts with NUL). */
const MULTIPART_TAG = '\0multipart\0';

/**
 * The canonical text of a multipart body: its fields canonicalized as JSON (sorted by name,
 * a repeated name's values in their order), then its files sorted by field name, those of one
 * field in their order. Meant to be hashed, not parsed again.
 */
export function canonicalMultipart(parts: MultipartParts, limits: JsonLimits): string {
  const files = [...parts.files]
    // Array.prototype.sort is stable: files of one field keep their relative order.
    .sort((a, b) => (a.field < b.field ? -1 : a.field > b.field ? 1 : 0))
    .map((file) => ({
      field: file.field,
      filename: file.filename,
      mimetype: file.mimetype,
      size: file.content.length,
      sha256: createHash('sha256').update(file.content).digest('hex'),
    }));
  return MULTIPART_TAG + canonicalizeValue({ fields: parts.fields, files }, limits);
}

/** What multer puts on the request for each file (`req.file`, `req.files`). */
interface MulterFile {
  fieldname: string;
  originalname: string;
  mimetype: string;
  buffer?: Buffer;
}

/** What `@fastify/multipart` puts in the body for each part (`attachFieldsToBody: true`). */
interface FastifyPart {
  type: 'file' | 'field';
  fieldname: string;
  filename?: string;
  mimetype?: string;
  value?: unknown;
  _buf?: Buffer | null;
}

function isFastifyPart(value: unknown): value is FastifyPart {
  const part = value as Partial<FastifyPart> | null;
  return (
    typeof part === 'object' &&
    part !== null &&
    (part.type === 'file' || part.type === 'field') &&
    typeof part.fieldname === 'string'
  );
}

function isMulterFile(value: unknown): value is MulterFile {
  const file = value as Partial<MulterFile> | null;
  return typeof file === 'object' && file !== null && typeof file.fieldname === 'string';
}

function fromMulter(file: MulterFile): UploadedFilePart {
  if (!Buffer.isBuffer(file.buffer)) throw new UnkeptUploadError(file.fieldname);
  return {
    field: file.fieldname,
    filename: file.originalname,
    mimetype: file.mimetype,
    content: file.buffer,
  };
}

/**
 * The parts of a parsed multipart request, from whichever parser read it; undefined when none
 * did. Multer leaves the text fields in `body` and the files in `file` or `files` (a list, or
 * lists by field); `@fastify/multipart` leaves both in `body`, as parts (`attachFieldsToBody:
 * true`) or as values and buffers (`'keyValues'`).
 *
 * @throws UnkeptUploadError for a file whose bytes were not kept in memory.
 */
export function multipartParts(request: {
  body?: unknown;
  file?: unknown;
  files?: unknown;
}): MultipartParts | undefined {
  const { body, file, files: uploaded } = request;
  // Only multer's objects count: @fastify/multipart decorates every request with file() and
  // files() methods, there whether or not anything was parsed.
  const parsed = [body, file, uploaded].some(
    (value) => typeof value === 'object' && value !== null,
  );
  if (!parsed) return undefined;
  const files: UploadedFilePart[] = [];
  if (isMulterFile(file)) files.push(fromMulter(file));
  const lists = Array.isArray(uploaded)
    ? [uploaded]
    : uploaded && typeof uploaded === 'object'
      ? Object.values(uploaded as Record<string, unknown>)
      : [];
  for (const list of lists) {
    for (const item of Array.isArray(list) ? list : [list]) {
      if (isMulterFile(item)) files.push(fromMulter(item));
    }
  }

  const fields: Record<string, unknown> = {};
  const source = body && typeof body === 'object' ? (body as Record<string, unknown>) : {};
  for (const [name, entry] of Object.entries(source)) {
    const values: unknown[] = [];
    for (const item of Array.isArray(entry) ? entry : [entry]) {
      if (isFastifyPart(item)) {
        if (item.type === 'field') {
          values.push(item.value);
        } else if (Buffer.isBuffer(item._buf)) {
          files.push({
            field: item.fieldname,
            filename: item.filename ?? null,
            mimetype: item.mimetype ?? null,
            content: item._buf,
          });
        } else {
          throw new UnkeptUploadError(item.fieldname);
        }
      } else if (Buffer.isBuffer(item)) {
        files.push({ field: name, filename: null, mimetype: null, content: item });
      } else {
        values.push(item);
      }
    }
    // Defined, not assigned: a field named `__proto__` would set the object's prototype (or
    // nothing), and drop out of the fingerprint.
    if (values.length > 0) {
      Object.defineProperty(fields, name, {
        value: Array.isArray(entry) ? values : values[0],
        enumerable: true,
        writable: true,
        configurable: true,
      });
    }
  }
  return { fields, files };
}
