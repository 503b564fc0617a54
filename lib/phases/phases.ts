import { isWellFormedText } from '../decisions/well-formed.js';
import { type ActiveClaim } from '../shapes/active-claim.js';

/** Whether a phase completed in an earlier run of this claim, and what it returned. */
export type CompletedPhase = { completed: true; result: unknown } | { completed: false };

/**
 * The phase bookkeeping: a phase is complete when its result was recorded with the recovery
 * point. Results are kept by name rather than inferred from the recovery point's position,
 * so a handler whose phases depend on data (a phase that only sometimes runs) resumes right.
 */
export function completedPhase(results: Record<string, unknown>, phase: string): CompletedPhase {
  return Object.prototype.hasOwnProperty.call(results, phase)
    ? { completed: true, result: results[phase] }
    : { completed: false };
}

/**
 * The key for an external call made in `phase`: the claim's own id (new for every claim of a
 * key, shared by every worker that takes the claim over, and unique across tenants) joined
 * with the phase's name.
 */
export function derivedKey(claim: Pick<ActiveClaim, 'claimId'>, phase: string): string {
  return `${claim.claimId}:${phase}`;
}

/**
 * Whether PostgreSQL can record `phase` as it is, as a key of the phases' results: whole text
 * without NUL. node-postgres writes a lone surrogate as U+FFFD, so a name cut inside an emoji
 * would be recorded under another name (two such names under one).
 */
export function recordablePhaseName(phase: string): boolean {
  return isWellFormedText(phase) && !phase.includes('\u0000');
}
