/** How an owned request's answer is kept, decided before anything is stored. */
export type StorePlan =
  /** `storeIf` refuses its status: nothing of the request stays, the key is given back. */
  | 'not-stored'
  /** The handler failed, or its answer was too large: its effects roll back, the answer is stored alone. */
  | 'alone'
  /** Stored in the request's transaction, committed with the handler's effects. */
  | 'with-effects';

/**
 * The plan for an answer of `status`; `withoutEffects` when the handler's effects must not
 * commit (it threw, or its answer was too large to store and a 500 takes its place).
 */
export function storePlan(
  status: number,
  withoutEffects: boolean,
  storeIf: (status: number) => boolean,
): StorePlan {
  if (!storeIf(status)) return 'not-stored';
  return withoutEffects ? 'alone' : 'with-effects';
}

/**
 * Whether an answer that settled after an outer interceptor answered for it can be stored:
 * not a failure (rolled back, for the retry to run again and get its real answer), not the
 * answer of a handler that takes the response (`@Res()`, passthrough or not: it wrote its
 * answer itself, or set a status and headers that the timeout's answer overwrote), and not a
 * stream, which the adapter no longer sends, so what it would have carried is not known.
 */
export function lateAnswerStorable(late: {
  failed: boolean;
  takesResponse: boolean;
  stream: boolean;
}): boolean {
  return !late.failed && !late.takesResponse && !late.stream;
}
