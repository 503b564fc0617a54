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
}
