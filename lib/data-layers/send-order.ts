/**
 * The statements of one view of a runner (its `query()` and its node-postgres client's), sent
 * in the order they were called, as node-postgres sends a client's queries. A statement that
 * sets a setting inside a nested transaction first reads the setting's value (a round trip:
 * `NestedCommit.before`); one called after it without awaiting (`Promise.all([set_config(…),
 * INSERT …])`) must not overtake it, or it runs without the setting. Each waits until the one
 * called before it through the same view was sent (not answered: they still pipeline on the
 * connection), then does its own preparation, then is sent.
 */
export class SendOrder {
  private readonly last = new WeakMap<object, Promise<unknown>>();

  /**
   * `send` called once what was called through `by` before it was sent and `prepare` is done;
   * what `send` returned, boxed (a promise it returns is the statement's answer, not awaited
   * here, so that the next statement is sent without waiting for it).
   */
  after<T>(by: object, prepare: () => Promise<void>, send: () => T): Promise<{ sent: T }> {
    const before = this.last.get(by) ?? Promise.resolve();
    const turn = before.then(prepare).then(() => ({ sent: send() }));
    // A statement that failed to prepare (or to be sent) holds none after it up.
    this.last.set(
      by,
      turn.catch(() => undefined),
    );
    return turn;
  }
}
