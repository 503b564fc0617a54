/** A submittable as node-postgres tells it how it ends (a pg-query-stream, a pg-cursor). */
interface Submitted {
  handleReadyForQuery?: (...args: unknown[]) => unknown;
  handleError?: (...args: unknown[]) => unknown;
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

  /** Whether a stream is open. */
  get any(): boolean {
    return this.open.size > 0;
  }

  /**
   * Counts `stream` open until node-postgres says it ended (read to its end, or closed: its
   * portal closed, the connection ready again) or failed (an error, a refusal before it was
   * submitted, the connection lost).
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
  }
}
