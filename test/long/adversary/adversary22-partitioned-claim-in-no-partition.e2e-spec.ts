import { randomBytes } from 'node:crypto';
import { type DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../../../lib/index.js';
import { IdempotencyDatabase } from '../../../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../../../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';
import { PARTITIONS_SUPPORTED } from '../../support/postgres-version.js';

/**
 * Adversary, round 22: on the partitioned table (`partitionedExpiry`), a `oneCommit` claim
 * that meets "no partition of relation idempotency_keys found for row" (23514: the partitions
 * ran out sooner than the process reckoned) fails, and every claim after it fails the same
 * way: `claimIn` never makes the partitions again. The claims made apart recover at once
 * (they make the partitions and run again), so on the same process a route without
 * `oneCommit` goes on working while every `oneCommit` route answers 503 `store_unavailable`
 * ("Retry later") for every new key, and every retry too, until something else happens to make partitions (the purger's next run, or a claim of a
 * route without `oneCommit`; with `oneCommit` module-wide, only the purger).
 *
 * What the app does: the partitioned layout (`PartitionIdempotencyKeys1764461600000`,
 * `partitionedExpiry: { partitionMs: 3_600_000 }`), one store, as one process has. The
 * partitions for "now" go away after the store made them (an operator dropped them by hand,
 * or the database's clock jumped ahead of the one the process reckons by: both named by the
 * library itself as what this recovery is for).
 *
 * What happens: partitioned-postgres-claim.store.ts:86-90 (`claimIn`) only
 * `ensurePartitions()` (which trusts `coveredUntil`) before `super.claimIn`; the recovery of
 * `sendClaims` (partitioned-postgres-claim.store.ts:106-113: `isNoPartitionError` ->
 * `coveredUntil = undefined`, `createPartitions()`, run again) is not on this path, so the
 * error goes out as a 503 (postgres-claim.store.ts:157-163, `failureOf(..., 'claim')`) and
 * `coveredUntil` stays wrong: the next `claimIn` fails again, and the next.
 *
 * What should happen: the store's own comment (partitioned-postgres-claim.store.ts:109-110):
 * "Partitions ran out sooner than this process reckoned (dropped by hand, a clock that
 * jumped): made now, and the claims run once more." `oneCommit` is a way of committing, not a
 * different store: its claims should recover as the claims apart do.
 *
 * Why it matters: a recoverable condition, recovered in milliseconds on routes without
 * `oneCommit`, becomes an outage of every `oneCommit` route until the purger's next run (`purgeIntervalMs`), its
 * 503s inviting retries that all fail the same way.
 *
 * Severity: medium (availability; nothing claimed twice).
 */
const describeIf = PARTITIONS_SUPPORTED ? describe : describe.skip;

describeIf(
  'adversary 22: a oneCommit claim on the partitioned table never remakes partitions',
  () => {
    let database: MigratedDatabase;
    let dataSource: DataSource;
    let db: IdempotencyDatabase;
    let store: PartitionedPostgresClaimStore;

    beforeAll(async () => {
      database = await createMigratedDatabase('adv22_claim_in_partitions', [
        PartitionIdempotencyKeys1764461600000,
      ]);
      dataSource = database.dataSource;
      db = new IdempotencyDatabase(() => dataSource, 5000);
      store = new PartitionedPostgresClaimStore(db, {
        partitionMs: 3_600_000,
        partitionsAhead: 2,
      });
    }, 60_000);

    afterAll(async () => {
      await database?.drop();
    });

    const scope = (key: string) => ({ tenantId: '1', key });
    const fingerprint = randomBytes(32);

    /** The partitions from now on go away (by hand, or the database's clock jumps past them). */
    async function partitionsGone() {
      const live = (await dataSource.query(
        `SELECT partition::text AS name FROM idempotency_key_partitions()
       WHERE to_at IS NULL OR to_at > clock_timestamp()`,
      )) as { name: string }[];
      expect(live.length).toBeGreaterThan(0);
      for (const { name } of live) {
        await dataSource.query(`ALTER TABLE idempotency_keys DETACH PARTITION ${name}`);
        await dataSource.query(`DROP TABLE ${name}`);
      }
    }

    /** A oneCommit claim in a request's transaction, committed at once (as with the answer). */
    async function claimIn(key: string) {
      const transaction = db.transaction(false);
      try {
        const outcome = await store.claimIn(scope(key), fingerprint, 60_000, transaction, 1000);
        return outcome.kind;
      } catch (error) {
        return `error: ${String((error as Error).message ?? error).slice(0, 80)}`;
      } finally {
        await transaction.rollback();
      }
    }

    it('control: a claim made apart remakes the partitions and runs again', async () => {
      expect((await store.claim(scope('adv22-warm'), fingerprint, 60_000)).kind).toBe('claimed');
      await partitionsGone();
      expect((await store.claim(scope('adv22-apart'), fingerprint, 60_000)).kind).toBe('claimed');
    });

    it('oneCommit: the claim in the transaction recovers too (fails: every one errs)', async () => {
      await partitionsGone();
      const outcomes = [await claimIn('adv22-in-1'), await claimIn('adv22-in-2')];
      // Received: two 503s ("The idempotency store is unavailable ... Retry later.", logged as
      // "no partition of relation idempotency_keys found for row"): nothing makes the
      // partitions again on this path.
      // Fixed: the first remakes the partitions and sends its caller to claim apart (which runs
      // the claim once more, as `sendClaims` does); the next one claims in its transaction.
      expect(outcomes).toEqual(['apart', 'claimed']);
    });
  },
);
