/** A submittable as node-postgres tells it how it ends (a pg-query-stream, a pg-cursor). */
interface Submitted {
  handleReadyForQuery?: (...args: unknown[]) => unknown;
  handleError?: (...args: unknown[]) => unknown;
}

/** A pg-cursor, as far as its close is read: a pg-query-stream wraps one (`cursor`). */
export interface Closable {
  close?: (...args: unknown[]) => unknown;
  /** Its connection once node-postgres submitted it; none while it waits in the queue. */
  connection?: unknown;
}

/**
 * The streams open on the request's TypeORM connection (`runner.stream()`,
 * `SelectQueryBuilder.stream()`: a pg-query-stream). While one is open, node-postgres runs
 * nothing else on that connection: a statement sent then waits for the stream to end, and
 * the code reading the stream most often awaits that statement first (a write per streamed
 * row), so it is refused at once (see `CursorOpenRefusedError`). The pool seam's
 * `watchCursor`, for TypeORM: its stream is handed to the connection only once the request's
 * `BEGIN` succeeded, before its code holds it, so it is open from the moment it is watched.
 */
export class OpenStreams {
  private readonly open = new Set<object>();

  /** Whether a stream is open (and not closing). */
  get any(): boolean {
    return this.open.size > 0;
  }

  /**
   * Counts `stream` open until node-postgres says it ended (read to its end, or closed: its
   * portal closed, the connection ready again) or failed (an error, a refusal before it was
   * submitted, the connection lost), or until its code closes it: a stream left by `break`
   * out of its `for await` is destroyed, and closes its cursor, which sends the portal's Close
   * and a Sync at once. Its ReadyForQuery comes a round trip later, but a statement sent
   * meanwhile waits for nothing of its code's: node-postgres queues it behind the close, and
   * runs it once that ReadyForQuery came. A cursor closed while it still waits in
   * node-postgres' queue (no connection yet) sends nothing, and would run when its turn came,
   * with no one to read it: that one still counts open.
   */
  watch(stream: object): void {
    const submitted = stream as Submitted;
    this.open.add(stream);
    for (const method of ['handleReadyForQuery', 'handleError'] as const) {
      const own = submitted[method];
      if (typeof own !== 'function') continue;
      submitted[method] = (...args: unknown[]) => {
        this.open.delete(stream);
        return own.apply(stream, args);
      };
    }
    const cursor = cursorOf(stream);
    const close = cursor?.close;
    if (!cursor || typeof close !== 'function') return;
    cursor.close = (...args: unknown[]) => {
      if (closesOnTheWire(cursor)) this.open.delete(stream);
      return close.apply(cursor, args);
    };
  }
}

/** The cursor whose `close()` ends `stream`: itself (a pg-cursor), or the one it wraps. */
export function cursorOf(stream: object): Closable | undefined {
  const wrapped = (stream as { cursor?: unknown }).cursor;
  if (typeof wrapped === 'object' && wrapped !== null) return wrapped as Closable;
  return typeof (stream as Closable).close === 'function' ? (stream as Closable) : undefined;
}

/**
 * Whether the connection is ready again after a cursor's `close()` without its code: it was
 * submitted, so its portal's Close and a Sync are sent now (pg-cursor's `_closePortal`), or
 * were sent already (`done`: read to its end, its ReadyForQuery on its way; `error`: its Sync
 * sent).
 */
export function closesOnTheWire(cursor: Closable): boolean {
  return cursor.connection !== undefined && cursor.connection !== null;
}
