/**
 * A duration as an operator reads it: its largest whole unit, rounded down, so that the same
 * state prints the same text for a while (a key stuck for 2 h 59 min reads "2 h", not a figure
 * that changes every second).
 */
const UNITS: readonly [number, string][] = [
  [86_400_000, 'd'],
  [3_600_000, 'h'],
  [60_000, 'min'],
  [1_000, 's'],
];

export function formatDuration(ms: number): string {
  const magnitude = Math.abs(ms);
  for (const [size, unit] of UNITS) {
    if (magnitude >= size) return `${Math.floor(magnitude / size)} ${unit}`;
  }
  return `${Math.floor(magnitude)} ms`;
}
