/**
 * What node-postgres rejects a statement with when its per-query `query_timeout` (or the
 * client's) runs out: a read timeout on the client's side only. The statement goes on running
 * on the server and stays the client's active query (pg/lib/client.js: its callback is called
 * with the error and replaced by a no-op; nothing is sent to the server), so what is queued
 * behind it on that connection waits for its end. One still queued when it runs out is taken
 * off the queue and never runs.
 */
const READ_TIMEOUT = 'Query read timeout';

/**
 * Whether a statement whose promise rejected with `error` may still be running on its
 * connection: node-postgres' read timeout (see `READ_TIMEOUT`). Any other rejection comes from
 * the server's answer (its ErrorResponse, followed at once by its ReadyForQuery), from the
 * connection's loss, or from a refusal before it was sent: nothing of it runs on. Either way a
 * read timeout did nothing to the transaction it was sent in: the client gave up waiting.
 */
export function stillRunningAfter(error: unknown): boolean {
  return error instanceof Error && error.message === READ_TIMEOUT;
}
