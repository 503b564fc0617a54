/** A key this worker owns: what the claim or the takeover returned. */
export interface ActiveClaim {
  tenantId: string;
  key: string;
  /** The row's own id: new for every claim of a key, shared by every worker that takes it over. */
  claimId: string;
  /** The fencing token: every write of this worker is conditional on it. */
  lockVersion: string;
  /** The last completed atomic phase (`start` when none has). */
  recoveryPoint: string;
  /** What the completed phases returned, by phase name. */
  phaseResults: Record<string, unknown>;
  leaseMs: number;
  /**
   * The earliest its record may count as finished (ms since the epoch), written by the
   * statement that marks it done, in its COMMIT: a tick's record held until its slot ends
   * (see `tickRecordFinishedAt`). Unset: it finishes when it commits.
   */
  finishedAtLeastMs?: number;
}
