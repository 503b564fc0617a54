import { Stream } from 'node:stream';

/** A submittable as node-postgres tells it how it ends. */
interface Submitted {
  handleReadyForQuery?: unknown;
  close?: unknown;
  cursor?: unknown;
}

/**
 * Whether a submittable handed to the connection runs to its end by itself, without its code
 * (a `pg.Query`): its end is then the connection's, and the library's own statements queued
 * behind it wait for it. Not a cursor (pg-cursor's `close`, pg-query-stream's `cursor`) nor a
 * stream (a COPY's): each stops mid-way until its code reads or writes on, and waited for, one
 * its code left open would hold the commit for ever (a cursor left open is refused at the
 * commit: `refuseLeftOpen`).
 */
export function runsToItsEnd(submittable: unknown): boolean {
  if (typeof submittable !== 'object' || submittable === null) return false;
  if (submittable instanceof Stream) return false;
  const submitted = submittable as Submitted;
  if (typeof submitted.close === 'function') return false;
  if (typeof submitted.cursor === 'object' && submitted.cursor !== null) return false;
  return typeof submitted.handleReadyForQuery === 'function';
}

/** node-postgres' client, as far as its readiness is read (pg's JavaScript client). */
interface Readiness {
  readyForQuery?: unknown;
  connection?: {
    once?: (event: string, listener: () => void) => unknown;
    removeListener?: (event: string, listener: () => void) => unknown;
  };
}

/**
 * Settles once `client` is ready for its next statement: now if it is, else at its
 * connection's next ReadyForQuery (the end of the statement it runs), or when the connection
 * ends or fails. For a statement given up on by node-postgres' read timeout
 * (`stillRunningAfter`, lib/connection/read-timeout.ts): running, it is the client's active
 * query, and that ReadyForQuery is its end; still queued, node-postgres took it off the queue,
 * and it never runs. A client that does not tell
 * (pg-native's) settles at once, as before. Never rejects.
 */
export function readyForNext(client: unknown): Promise<void> {
  const { readyForQuery, connection } = (client ?? {}) as Readiness;
  if (readyForQuery !== false) return Promise.resolve();
  if (typeof connection?.once !== 'function') return Promise.resolve();
  return new Promise<void>((resolve) => {
    const events = ['readyForQuery', 'end', 'error'];
    const done = () => {
      for (const event of events) connection.removeListener?.(event, done);
      resolve();
    };
    for (const event of events) connection.once!(event, done);
  });
}
