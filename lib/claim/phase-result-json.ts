/**
 * A phase's result as the `phase_results` jsonb column holds it. JSON keeps what jsonb refuses:
 * `JSON.stringify` writes a NUL as `\u0000` and a lone surrogate (a string cut inside an emoji
 * by `slice()`) as `\ud83c`, and PostgreSQL rejects both (22P05, 22P02). Such a result, after
 * the external call it records was made, must still be stored as it is, since a takeover hands
 * it back to the resumed code: it is stored as its JSON text in a one-key wrapper, which jsonb
 * holds as an ordinary string, and read back whole.
 */
const WRAPPER = '$idempotencyJsonText';

/** An escape jsonb refuses, not itself escaped: `\u0000`, or `\ud800` to `\udfff`. */
const REFUSED_ESCAPE = /(?:^|[^\\])(?:\\\\)*\\u(?:0000|d[89a-f][0-9a-f]{2})/i;

/** A plain object whose one key is the wrapper's: read back as wrapped unless wrapped itself. */
function looksWrapped(value: unknown): value is Record<typeof WRAPPER, unknown> {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return false;
  const keys = Object.keys(value);
  return keys.length === 1 && keys[0] === WRAPPER;
}

/** The JSON text to store for a phase's result (`undefined` stored as `null`). */
export function phaseResultText(value: unknown): string {
  const text = JSON.stringify(value === undefined ? null : value);
  // A result shaped like the wrapper is wrapped too, so that reading it back cannot mistake it.
  if (!REFUSED_ESCAPE.test(text) && !looksWrapped(JSON.parse(text))) return text;
  return JSON.stringify({ [WRAPPER]: text });
}

/** The phases' results as they were stored by `phaseResultText`. */
export function phaseResultsRead(stored: Record<string, unknown>): Record<string, unknown> {
  const results: Record<string, unknown> = {};
  for (const [phase, value] of Object.entries(stored)) {
    const read =
      looksWrapped(value) && typeof value[WRAPPER] === 'string'
        ? (JSON.parse(value[WRAPPER]) as unknown)
        : value;
    // Defined, not assigned: a phase named `__proto__` is a result like any other.
    recordPhaseResult(results, phase, read);
  }
  return results;
}

/**
 * Records `value` as `phase`'s result in `results`: defined as an own property, as JSON.parse
 * makes it, so that a phase named `__proto__` (a client's SKU) is found by `completedPhase`,
 * where an assignment would set the object's prototype instead.
 */
export function recordPhaseResult(
  results: Record<string, unknown>,
  phase: string,
  value: unknown,
): void {
  Object.defineProperty(results, phase, {
    value,
    enumerable: true,
    writable: true,
    configurable: true,
  });
}
