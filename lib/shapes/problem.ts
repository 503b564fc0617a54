/** An RFC 9457 problem, as the IETF idempotency draft suggests for its error answers. */
export interface Problem {
  status: number;
  headers: Record<string, string>;
  body: {
    type: string;
    title: string;
    status: number;
    detail: string;
    code: string;
  } & Record<string, unknown>;
}

/**
 * An answer of the library's in the app's own shape, as `renderProblem` returns it.
 *
 * @example { body: { error: { type: 'idempotency_error', code: problem.body.code } } }
 */
export interface RenderedProblem {
  /** @default the problem's status */
  status?: number;
  /**
   * Headers of the answer, lower-cased or not; they replace the library's of the same name.
   * The problem's `Retry-After` is kept unless given here.
   * @default { 'content-type': 'application/json; charset=utf-8' }
   */
  headers?: Record<string, string>;
  /** The body, sent (and stored, when the answer is the key's) as `JSON.stringify(body)`. */
  body: object;
}

/** Turns a problem (the library's refusal or failure) into the app's own answer. */
export type ProblemRenderer = (problem: Problem) => RenderedProblem;
