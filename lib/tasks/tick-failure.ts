import { type StoredResponse } from '../shapes/stored-response.js';

/** How often a tick that fails after a phase committed is taken over to go on, at most. */
const MAX_TAKEOVERS = 3;

/**
 * Whether a tick that threw is left for a later tick to resume (a pure decision): where a
 * phase of it committed (a call out made, which its next run goes on after), and it has not
 * been taken over `MAX_TAKEOVERS` times already. Else its failure is kept as its answer.
 */
export function resumesAfterFailure(claim: {
  lockVersion: number | string;
  phaseResults: Readonly<Record<string, unknown>>;
}): boolean {
  return Object.keys(claim.phaseResults).length > 0 && Number(claim.lockVersion) < MAX_TAKEOVERS;
}

/** A failed tick's answer: its error's message, kept for `keys show`. */
export function tickFailed(cause: unknown): StoredResponse {
  const message = cause instanceof Error ? cause.message : String(cause);
  return {
    status: 500,
    headers: { 'content-type': 'text/plain; charset=utf-8' },
    body: Buffer.from(`the tick failed, and is not run again: ${message}`, 'utf8'),
  };
}
