import { type ServerResponse } from 'node:http';
import { type Observable, of } from 'rxjs';
import { REPLAYED_HEADER } from '../shapes/idempotency.constants.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { holdResponse, send } from './response-hold.js';

/** A stored response as it is replayed: the same status and bytes, marked as a replay. */
export function replayed(stored: StoredResponse): StoredResponse {
  return {
    status: stored.status,
    headers: { ...stored.headers, [REPLAYED_HEADER.toLowerCase()]: 'true' },
    body: stored.body,
  };
}

/**
 * The adapter sends an empty body; the hold puts the stored response in its place. On a
 * route that writes its own response (`@Res()`), Nest sends nothing: it is written here.
 */
export function replay(
  raw: ServerResponse,
  stored: StoredResponse,
  responseHandled: boolean,
): Observable<undefined> {
  const answer = replayed(stored);
  if (responseHandled) {
    send(raw, answer, true);
  } else {
    holdResponse(
      raw,
      async () => answer,
      () => answer,
    );
  }
  return of(undefined);
}
