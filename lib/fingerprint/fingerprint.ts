import { createHash } from 'node:crypto';
import { type IdempotencyRequest } from '../http/idempotency-request.js';
import { type ResolvedRouteOptions } from '../idempotency-options.interface.js';
import {
  canonicalizeJsonText,
  canonicalizeValue,
  type JsonLimits,
  MAX_JSON_LIMITS,
} from './canonical-json.js';

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

function isJsonContentType(contentType: string | string[] | undefined): boolean {
  if (typeof contentType !== 'string') return false;
  const mediaType = contentType.split(';', 1)[0].trim().toLowerCase();
  return mediaType === 'application/json' || mediaType.endsWith('+json');
}

/**
 * The canonical body: from the raw bytes when the app keeps them (`rawBody: true`), which is
 * exact for any number; otherwise from the parsed body, exact for numbers a JavaScript number
 * holds. JSON is canonicalized (keys sorted, white space dropped, numbers normalized), any
 * other body is taken byte for byte.
 */
export function canonicalBody(
  request: IdempotencyRequest,
  limits: JsonLimits = MAX_JSON_LIMITS,
): string | Buffer {
  const raw = request.rawBody;
  if (Buffer.isBuffer(raw)) {
    if (raw.length === 0) return '';
    return isJsonContentType(request.headers['content-type'])
      ? canonicalizeJsonText(raw.toString('utf8'), limits)
      : raw;
  }
  const body = request.body;
  if (body === undefined || body === null) return '';
  if (Buffer.isBuffer(body)) return body;
  if (typeof body === 'string') return body;
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
