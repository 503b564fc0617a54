/**
 * What a tick's record says of its COMMIT whose answer was lost (node-postgres' read timeout,
 * a connection gone as it committed), read after it (`READ_TICK_RECORD`):
 *  - `locked`: its row is locked (55P03): the COMMIT still runs on the server;
 *  - `row`: its state and claim as they are now;
 *  - `none`: no record;
 *  - `failed`: it could not be read.
 */
export type TickRecordRead =
  | { kind: 'locked' }
  | { kind: 'row'; state: string; claimId: string; lockVersion: number | string }
  | { kind: 'none' }
  | { kind: 'failed' };

/**
 * What became of the tick (a pure decision): `committed` where its record is done by this
 * run's claim (its work committed with it, only its answer was late); `rolled-back` where the
 * record is still this claim's, unfinished, and no COMMIT holds it (nothing of the tick was
 * kept); `in-flight` where its COMMIT still runs (read again); `unknown` otherwise (another
 * claim's now, gone, unreadable): the tick may have committed, and its record says which.
 * Never "not committed" without the record to say so (adversary 88: a committed tick was
 * reported as "did not commit, nothing of it was kept").
 */
export type TickOutcome = 'committed' | 'rolled-back' | 'in-flight' | 'unknown';

export function tickOutcome(
  read: TickRecordRead,
  claim: { claimId: string; lockVersion: number | string },
): TickOutcome {
  if (read.kind === 'locked') return 'in-flight';
  if (read.kind !== 'row') return 'unknown';
  // (A pool may read the bigint as a number, or as a string: compared as numbers.)
  const ours =
    read.claimId === claim.claimId && Number(read.lockVersion) === Number(claim.lockVersion);
  if (!ours) return 'unknown';
  if (read.state === 'done') return 'committed';
  if (read.state === 'started') return 'rolled-back';
  return 'unknown';
}
