import { expect } from '@jest/globals';

/** The replay marker's text, as the drivers write it at the end of the answer. */
export function replayMarker(fields: string[]): string {
  return `"extensions":{"idempotency":{"replayed":${JSON.stringify(fields)}}}`;
}

/** An answer's text without its replay marker, to compare with the first answer's bytes. */
export function withoutMarker(text: string): string {
  return text.replace(/,"extensions":\{"idempotency":\{"replayed":\[[^\]]*\]\}\}/, '');
}

/**
 * `replay` is a replay of the fields `fields` of `first`: the first answer's bytes, with the
 * marker that says so, and nothing else, added.
 */
export function expectReplayOf(
  replay: { text: string },
  first: { text: string },
  fields: string[],
): void {
  expect(replay.text).toContain(replayMarker(fields));
  expect(withoutMarker(replay.text)).toBe(first.text);
}
