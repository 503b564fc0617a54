import { type StoredResponse } from '../stored-response.js';

const JSON_TYPE = 'application/json; charset=utf-8';

/**
 * The response the HTTP adapter would have written for a handler's return value, for the one
 * case where none writes it: an outer interceptor (a global timeout, say) answered first, the
 * handler went on, and its own answer is what the retries must receive. It follows Nest's
 * adapters: Express sends objects with `res.json()` and anything else as `String(value)`
 * (HTML, as `res.send()` types strings); Fastify sends strings as plain text and other values
 * as JSON. A `Content-Type` set with `@Header()` wins, as it does on the adapters.
 */
export function renderResult(
  value: unknown,
  status: number,
  headers: Readonly<Record<string, string>>,
  adapter: string,
): StoredResponse {
  const out: Record<string, string> = { ...headers };
  if (value === undefined || value === null) return { status, headers: out, body: Buffer.alloc(0) };
  const [body, type] = serialize(value, adapter);
  out['content-type'] ??= type;
  return { status, headers: out, body: Buffer.from(body) };
}

function serialize(value: unknown, adapter: string): [string, string] {
  if (adapter === 'fastify') {
    return typeof value === 'string'
      ? [value, 'text/plain; charset=utf-8']
      : [JSON.stringify(value), JSON_TYPE];
  }
  return typeof value === 'object'
    ? [JSON.stringify(value), JSON_TYPE]
    : [String(value), 'text/html; charset=utf-8'];
}
