import { stillRunningAfter } from '../connection/read-timeout.js';
import { readyForNext } from './still-running.js';

/** A submittable as node-postgres tells it how it ends (a `pg.Query`, a cursor). */
interface Submitted {
  handleReadyForQuery?: (...args: unknown[]) => unknown;
  handleError?: (...args: unknown[]) => unknown;
}

/**
 * Settles once node-postgres says `submittable`, handed to `client`, ended: its ReadyForQuery,
 * or its error (what is queued behind it on the connection runs then). One that node-postgres
 * could not tell (neither method) is taken as ended at once, so that nothing ever waits on it
 * forever.
 *
 * Its error from node-postgres' read timeout (`query_timeout`: `stillRunningAfter`) is not its
 * end: the client gave up waiting, and the statement runs on on the server as `client`'s active
 * query (pg/lib/client.js calls `handleError` from its timer and leaves it there). It ends at
 * `client`'s next ReadyForQuery (`readyForNext`; at once if `client` does not tell), or at its
 * own ReadyForQuery or server error before that: counted as ended at the read timeout, the
 * stored answer and `COMMIT` queued behind it met their deadline, 503 on every try
 * (adversary 83).
 */
export function endOf(submittable: object, client?: unknown): Promise<void> {
  const watched = submittable as Submitted;
  return new Promise<void>((resolve) => {
    let told = false;
    for (const method of ['handleReadyForQuery', 'handleError'] as const) {
      const own = watched[method];
      if (typeof own !== 'function') continue;
      told = true;
      watched[method] = (...args: unknown[]) => {
        if (method === 'handleError' && stillRunningAfter(args[0])) {
          void readyForNext(client).then(resolve);
        } else {
          resolve();
        }
        return own.apply(submittable, args);
      };
    }
    if (!told) resolve();
  });
}
