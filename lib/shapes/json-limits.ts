/**
 * Bounds on what a body may hold, so that canonicalizing one is linear in its size and quick:
 * an exponent of a million digits would otherwise be summed as a BigInt, which grows worse
 * than linearly (430 ms of blocked event loop for one such number in a 1 MiB body).
 */
export interface JsonLimits {
  /** Nesting of arrays and objects, at most 512. */
  maxDepth: number;
  /** Digits of a number's mantissa (integer and fraction together), and of its exponent. */
  maxNumberDigits: number;
  /** Object members in the whole body (every object's keys are sorted). */
  maxKeys?: number;
}
