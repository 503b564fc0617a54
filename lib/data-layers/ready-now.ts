/** What `IdempotencyDatabase.ready()` waits for, as it stands when a statement is about to run. */
export interface ReadinessState {
  /** The pooler was seen, or the options leave nothing to probe for. */
  poolerKnown: boolean;
  /** The server's default isolation level was read. */
  levelKnown: boolean;
  /** A schema check has not passed yet, or the run that passed has not settled. */
  schemaCheckPending: boolean;
}

/**
 * Whether the library's statements may run with nothing to wait for: every request's claim and
 * stored answer ask, and after start-up the answer is almost always yes. Told apart so that
 * `ready()` can then answer with one promise made once, not an async call and a
 * `Promise.all` of three (a handful of promises per statement, each paid for by every
 * AsyncLocalStorage of the process).
 */
export function readyNow(state: ReadinessState): boolean {
  return state.poolerKnown && state.levelKnown && !state.schemaCheckPending;
}
