import { createHash } from 'node:crypto';
import { type IdempotencyRequest } from '../shapes/idempotency-request.js';
import { type ResolvedRouteOptions } from '../shapes/idempotency-options.interface.js';
import {
  canonicalizeJsonText,
  canonicalizeValue,
  type JsonLimits,
  MAX_JSON_LIMITS,
} from './canonical-json.js';
import { canonicalForm } from './form-urlencoded.js';
import { canonicalMultipart, multipartParts } from './multipart.js';
import { announcesBody, UnreadBodyError } from './unseen-body.js';

/** What a fingerprint is computed over; built from the request by `fingerprintInput`. */
export interface FingerprintInput {
  method: string;
  /** The path with its parameters' values, and the query string only when configured. */
  path: string;
  /** Selected headers as `name:value`, names lower-cased and sorted. */
  headers: readonly string[];
  /** The canonical JSON text, or the raw bytes of a non-JSON body. */
  body: string | Buffer;
}

/**
 * SHA-256 over method, path, the selected headers and the canonical body. Fields are
 * separated by NUL, which none of them can contain before the body, so no two different
 * inputs hash the same bytes.
 */
export function computeFingerprint(input: FingerprintInput): Buffer {
  const hash = createHash('sha256');
  hash.update(input.method.toUpperCase());
  hash.update('\0');
  hash.update(input.path);
  hash.update('\0');
  for (const header of input.headers) {
    hash.update(header);
    hash.update('\0');
  }
  hash.update('\0');
  hash.update(input.body);
  return hash.digest();
}

/** The media type of a `Content-Type` header, lower-cased, without its parameters. */
export function mediaTypeOf(contentType: string | string[] | undefined): string {
  if (typeof contentType !== 'string') return '';
  return contentType.split(';', 1)[0].trim().toLowerCase();
}

function isJson(mediaType: string): boolean {
  return mediaType === 'application/json' || mediaType.endsWith('+json');
}

const FORM = 'application/x-www-form-urlencoded';
const MULTIPART = 'multipart/form-data';

/**
 * The canonical body, by its media type:
 * - JSON is canonicalized (keys sorted, white space dropped, numbers normalized): from the raw
 *   bytes when the app keeps them (`rawBody: true`), which is exact for any number; otherwise
 *   from the parsed body, exact for numbers a JavaScript number holds;
 * - a form (`application/x-www-form-urlencoded`) by its parameters, sorted by name, a repeated
 *   name's values in their order (see `canonicalForm`); without the raw bytes, from the parsed
 *   body as JSON (already sorted by name);
 * - `multipart/form-data` by its parsed parts: text fields and each file's field, name, media
 *   type and SHA-256 (see `canonicalMultipart`);
 * - anything else (`text/plain`, `application/octet-stream`...) byte for byte; no body is ''.
 *
 * @throws UnreadBodyError when the request announces a body that no parser read: fingerprinted
 *   without it, different requests would look the same.
 */
export function canonicalBody(
  request: IdempotencyRequest,
  limits: JsonLimits = MAX_JSON_LIMITS,
): string | Buffer {
  const mediaType = mediaTypeOf(request.headers['content-type']);
  if (mediaType === MULTIPART) {
    const parts = multipartParts(
      request as IdempotencyRequest & { file?: unknown; files?: unknown },
    );
    if (!parts) throw new UnreadBodyError(mediaType);
    return canonicalMultipart(parts, limits);
  }
  const raw = request.rawBody;
  if (Buffer.isBuffer(raw)) {
    if (raw.length === 0) return '';
    if (isJson(mediaType)) return canonicalizeJsonText(raw.toString('utf8'), limits);
    return mediaType === FORM ? canonicalForm(raw) : raw;
  }
  const body = request.body;
  if (body === undefined || body === null) {
    if (announcesBody(request.headers)) throw new UnreadBodyError(mediaType);
    return '';
  }
  if (Buffer.isBuffer(body)) return body;
  if (typeof body === 'string') return mediaType === FORM ? canonicalForm(body) : body;
  return canonicalizeValue(body, limits);
}

/** The request's path without its query string, unless the route fingerprints the query. */
export function requestPath(request: IdempotencyRequest, withQuery: boolean): string {
  const url = request.originalUrl ?? request.url;
  if (withQuery) return url;
  const query = url.indexOf('?');
  return query === -1 ? url : url.slice(0, query);
}

/** Gathers a request's fingerprint input as the route's options say. */
export function fingerprintInput(
  request: IdempotencyRequest,
  route: ResolvedRouteOptions,
): FingerprintInput {
  const headers = route.fingerprintHeaders.map((name) => {
    const value = request.headers[name];
    return `${name}:${Array.isArray(value) ? value.join(',') : (value ?? '')}`;
  });
  return {
    method: request.method,
    path: requestPath(request, route.fingerprintQuery),
    headers,
    body: canonicalBody(request, route.json),
  };
}
