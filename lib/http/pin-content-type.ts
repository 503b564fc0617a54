import { type ServerResponse } from 'node:http';

/**
 * Keeps a problem answer's `Content-Type` when the adapter later sets `application/json` on
 * the same response. Nest 11's Express adapter does that to every error body whose type is not
 * JSON (and logs a warning); Nest 12's does not. The body is JSON either way: only its media
 * type, which the API promises, is kept. On Fastify, which writes its headers at once, this
 * changes nothing.
 */
export function pinContentType(response: ServerResponse, contentType: string): () => void {
  const previous = response.setHeader;
  const setHeader = previous.bind(response);
  const pinned = function pinnedSetHeader(name: string, value: number | string | string[]) {
    if (name.toLowerCase() === 'content-type' && String(value).startsWith('application/json')) {
      return setHeader(name, contentType);
    }
    return setHeader(name, value);
  } as ServerResponse['setHeader'];
  response.setHeader = pinned;
  // Unpinned (an app's retry answers in its place): put back, if nothing wrapped it since.
  return () => {
    if (response.setHeader === pinned) response.setHeader = previous;
  };
}
