import { type ServerResponse } from 'node:http';
import { STORED_RESPONSE_HEADERS } from '../shapes/idempotency.constants.js';
import { type StoredResponse } from '../shapes/stored-response.js';

type Callback = (error?: Error | null) => void;
type Chunk = string | Buffer | Uint8Array;

/**
 * Decides what goes out once the adapter has written the whole response: the response as
 * written (`undefined`), or another one in its place.
 */
export type Finalizer = (written: StoredResponse) => Promise<StoredResponse | undefined>;

function toBuffer(chunk: Chunk, encoding?: BufferEncoding): Buffer {
  if (typeof chunk === 'string') return Buffer.from(chunk, encoding ?? 'utf8');
  return Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length);
}

function applyHeaders(raw: ServerResponse, headers: unknown): void {
  if (Array.isArray(headers)) {
    // writeHead's flat form: [name, value, name, value, ...]
    for (let i = 0; i + 1 < headers.length; i += 2)
      raw.setHeader(String(headers[i]), headers[i + 1]);
  } else if (headers && typeof headers === 'object') {
    for (const [name, value] of Object.entries(headers)) {
      if (value !== undefined) raw.setHeader(name, value as string | number | string[]);
    }
  }
}

/**
 * Holds back a response until `finalize` has run, at the level both adapters share: Node's
 * `ServerResponse`. Express and Fastify, exception filters and global interceptors all end in
 * `writeHead`/`write`/`end`; holding those here lets the library store the exact bytes the
 * client is about to receive and commit them before they leave ("commit before you answer"),
 * and lets it put a stored response (a replay) or a problem (a lost lease, a store failure)
 * in place of what the adapter wrote. Nothing reaches the socket before `finalize` settles,
 * so the status can still change. Whatever is written after the first `end` (a second answer
 * from an exception filter, say) is discarded: one response goes out.
 *
 * Returns a function that lets the response through untouched, if it is not yet ended (used
 * when nothing is to be stored).
 */
export function holdResponse(
  raw: ServerResponse,
  finalize: Finalizer,
  onFinalizeError: (
    error: unknown,
  ) => StoredResponse | undefined | Promise<StoredResponse | undefined>,
  limit?: ResponseLimit,
  /** The response headers kept with the stored response, lower-cased. */
  storedHeaders: readonly string[] = STORED_RESPONSE_HEADERS,
): () => void {
  const original = { writeHead: raw.writeHead, write: raw.write, end: raw.end };
  let chunks: Buffer[] = [];
  let held = 0;
  let overflowed = false;
  /** Keeps a chunk, unless the response has grown past the limit: then nothing more is kept. */
  const keep = (chunk: Buffer) => {
    if (overflowed) return;
    held += chunk.length;
    if (limit && held > limit.maxBytes) {
      overflowed = true;
      chunks = [];
      return;
    }
    chunks.push(chunk);
  };
  let state: 'holding' | 'finalizing' | 'released' = 'holding';

  const restore = () => {
    raw.writeHead = original.writeHead;
    raw.write = original.write;
    raw.end = original.end;
  };

  raw.writeHead = function heldWriteHead(this: ServerResponse, status: number, ...rest: unknown[]) {
    if (state !== 'holding') return raw;
    raw.statusCode = status;
    if (typeof rest[0] === 'string') {
      raw.statusMessage = rest[0];
      applyHeaders(raw, rest[1]);
    } else {
      applyHeaders(raw, rest[0]);
    }
    return raw;
  } as ServerResponse['writeHead'];

  raw.write = function heldWrite(chunk: Chunk, ...rest: unknown[]) {
    const encoding = typeof rest[0] === 'string' ? (rest[0] as BufferEncoding) : undefined;
    const callback = rest.find((arg): arg is Callback => typeof arg === 'function');
    if (state === 'holding' && chunk !== undefined && chunk !== null) {
      keep(toBuffer(chunk, encoding));
    }
    if (callback) process.nextTick(callback);
    return true;
  } as ServerResponse['write'];

  raw.end = function heldEnd(...args: unknown[]) {
    const callback = args.find((arg): arg is Callback => typeof arg === 'function');
    if (state !== 'holding') {
      if (callback) process.nextTick(callback);
      return raw;
    }
    state = 'finalizing';
    const chunk = typeof args[0] === 'function' ? undefined : (args[0] as Chunk | undefined);
    const encoding = typeof args[1] === 'string' ? (args[1] as BufferEncoding) : undefined;
    if (chunk !== undefined && chunk !== null) keep(toBuffer(chunk, encoding));
    const written = overflowed ? undefined : readWritten(raw, chunks, storedHeaders);
    // Started in a promise, so that a finalizer that throws at once reaches onFinalizeError
    // like one that rejects, rather than the adapter's end() (which would send nothing).
    const finalized = Promise.resolve().then(() =>
      written ? finalize(written) : limit!.onOverflow(),
    );
    finalized
      .catch(onFinalizeError)
      .then((replacement) => {
        restore();
        const answer = replacement ?? written;
        if (!answer) throw new Error('a response over its limit had nothing to replace it');
        send(raw, answer, replacement !== undefined, callback);
      })
      .catch((error: unknown) => {
        // Nothing sensible can be sent any more: end the exchange rather than leave it hanging.
        restore();
        raw.destroy(error instanceof Error ? error : new Error(String(error)));
      });
    return raw;
  } as ServerResponse['end'];

  return () => {
    if (state !== 'holding') return;
    state = 'released';
    restore();
  };
}

function readWritten(
  raw: ServerResponse,
  chunks: Buffer[],
  storedHeaders: readonly string[],
): StoredResponse {
  const headers: Record<string, string> = {};
  for (const name of storedHeaders) {
    const value = raw.getHeader(name);
    if (value !== undefined)
      headers[name] = Array.isArray(value) ? value.join(', ') : String(value);
  }
  return {
    status: raw.statusCode,
    headers,
    body: chunks.length === 1 ? chunks[0] : Buffer.concat(chunks),
  };
}

/**
 * The most a held response may grow to. Past it nothing more is buffered, and `onOverflow`
 * says what goes out in its place (the adapter's bytes are not kept, so they cannot go out).
 */
export interface ResponseLimit {
  maxBytes: number;
  onOverflow: () => Promise<StoredResponse>;
}

/**
 * Headers that belong to one answer, not to the exchange: cleared when it is replaced. A
 * file's `Content-Disposition` among them, or a problem put in its place would be saved as
 * the file.
 */
const ANSWER_HEADERS = [...STORED_RESPONSE_HEADERS, 'etag', 'retry-after', 'content-disposition'];

/** Statuses that never carry a body, nor a `Content-Length` (RFC 9110 §8.6). */
function bodiless(status: number): boolean {
  return status < 200 || status === 204 || status === 304;
}

/** Writes a response with Node's own methods (the hold must be lifted first). */
export function send(
  raw: ServerResponse,
  response: StoredResponse,
  replaced: boolean,
  callback?: Callback,
): void {
  if (raw.destroyed || raw.writableEnded) return;
  if (raw.headersSent) {
    raw.end(callback);
    return;
  }
  if (replaced) {
    raw.statusCode = response.status;
    // The headers that described the answer being replaced (its type, its ETag, a problem's
    // Retry-After) do not describe this one.
    for (const name of ANSWER_HEADERS) {
      if (!(name in response.headers)) raw.removeHeader(name);
    }
    for (const [name, value] of Object.entries(response.headers)) raw.setHeader(name, value);
  }
  raw.removeHeader('transfer-encoding');
  if (bodiless(response.status)) {
    raw.removeHeader('content-length');
    raw.end(callback);
    return;
  }
  // A HEAD response keeps the length the adapter computed for the body it does not send.
  if (raw.req?.method !== 'HEAD') raw.setHeader('content-length', response.body.length);
  raw.end(response.body, callback);
}
