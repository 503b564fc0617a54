import { Logger } from '@nestjs/common';
import { performance } from 'node:perf_hooks';
import { type PoolClient, type QueryResult } from 'pg';
import { IdempotencyStoreUnavailableError } from '../../shapes/idempotency.errors.js';
import { type ClaimRequest } from '../claim-batcher.js';
import { type KeyScope } from '../../shapes/claim-store.interface.js';
import { type StoreDatabase, type Statement } from '../../shapes/store-database.js';
import { type ClaimRow, type LateRows, PostgresClaimStore } from '../postgres-claim.store.js';
import { isNoPartitionError } from './layout-errors.js';
import { handOvers, type PartitionOwnership } from './partition-hand-over.js';
import { handOverRetryDue } from './hand-over-retry.js';
import { pendingDetachRemedy } from './pending-detach-remedy.js';
import { quoteName } from '../../connection/library-path.js';
import { pinSearchPath } from '../../connection/session-state.js';
import { withLibraryTypes } from '../../connection/library-types.js';
import { dateOfEpochMs } from '../../connection/epoch-ms.js';
import { coverageAction, expirySteps, type PartitionInfo } from './partition-schedule.js';
import { detachMode } from './detach-mode.js';
import {
  CARRY_FORWARD,
  CLAIM_BATCH_IN_PARTITIONS,
  CLAIM_IN_PARTITIONS,
  CREATE_PARTITIONS,
  DELETE_EXPIRED_IN_PARTITION,
  DETACH_CONDITIONS,
  LIST_PARTITIONS,
  PARTITION_CLOCK,
  PARTITION_OWNERS,
  PURGE_ABANDONED_IN_PARTITIONS,
} from './partitioned-statements.js';

/** How the table is cut: each partition's width, and how many are made ahead of the live one. */
export interface PartitionLayout {
  partitionMs: number;
  partitionsAhead: number;
}

/**
 * The purge's statements may wait on locks (a detach waits for the queries that may still
 * read its partition); past this they are cancelled, and the next purge goes on from there
 * (a detach left half done is finished first).
 */
const MAINTENANCE_STATEMENT_TIMEOUT_MS = 60_000;

/**
 * Behind a pooler in transaction mode the detach is not concurrent: it takes the table's
 * ACCESS EXCLUSIVE lock, and claims queue behind its request. It waits this long at most for
 * the statements still running on the table (claims and fenced writes take milliseconds);
 * past it the partition's transaction rolls back, changing nothing, and the next purge tries
 * again.
 */
const DETACH_LOCK_TIMEOUT_MS = 2_000;

/**
 * Giving an attached partition to the keys table's owner takes its ACCESS EXCLUSIVE lock, and
 * every claim reads or writes some partition: a request for that lock that waits (pg_dump or a
 * long read holds ACCESS SHARE on each partition for minutes) queues every claim behind it
 * (adversary 114). So the lock is taken with NOWAIT, and whatever else the ALTER locks (the
 * partition's indexes) is waited for this long at most: a claim never waits for a hand-over
 * longer than that. Given up, a partition is tried again at the next purge, or a partition's
 * width later (`handOverRetryDue`).
 */
const HAND_OVER_LOCK_TIMEOUT_MS = 5;

/** The lock that lets one instance at a time drop partitions (session or transaction level). */
const EXPIRY_LOCK = 'idempotency_keys_expiry';

interface PartitionRow {
  partition: string;
  from_ms: string | null;
  to_ms: string | null;
  detach_pending: boolean;
  droppable: boolean | null;
  owner: string | null;
}

interface DetachConditionsRow {
  has_default: boolean;
  keys_table: string;
  others_pending: string[];
  others_pending_owners: string[];
}

interface PartitionOwnerRow {
  partition: string;
  schema: string;
  owner: string;
  keys_owner: string;
  ours: boolean;
  member_of_keys_owner: boolean;
  keys_owner_may_create: boolean;
}

/**
 * The claim store on a partitioned `idempotency_keys` (the `PartitionIdempotencyKeys`
 * migration; `partitionedExpiry` in the module's options). Claims go through
 * `idempotency_claim()`, which keeps a key unique across partitions; the retention drops whole
 * partitions instead of deleting rows, so expiry leaves no dead tuples for vacuum. Everything
 * else (takeover, phases, finish, release) is the plain store's.
 *
 * Partitions are made ahead by the purge, and by the claims of a process that has not seen
 * them yet or sees them running out, so that keys never lack one when no purge runs.
 *
 * @example
 * // The module builds it for 'postgres' with `partitionedExpiry`; by hand, for a test:
 * new PartitionedPostgresClaimStore(new StoreDatabase(() => dataSource, 5000), {
 *   partitionMs: 3_600_000,
 *   partitionsAhead: 2,
 * });
 */
export class PartitionedPostgresClaimStore extends PostgresClaimStore {
  private readonly logger = new Logger('Idempotency');
  /** `performance.now()` up to which partitions are known to exist; undefined: not asked. */
  private coveredUntil?: number;
  private creating?: Promise<void>;
  /** The partitions of another role this process warned of (once each, not every purge). */
  private readonly warnedUndroppable = new Set<string>();
  /** Other roles' pending detaches this process warned of (once each). */
  private readonly warnedPendingDetach = new Set<string>();
  /** The schemas whose partitions this process could not give to the keys table's owner. */
  private readonly warnedHandOver = new Set<string>();
  /** When the last hand-over was given up (see `ensurePartitions`), and the retry under way. */
  private handOverGivenUpAt?: number;
  private handingOver?: Promise<void>;

  constructor(
    database: StoreDatabase,
    private readonly layout: PartitionLayout,
  ) {
    super(database);
  }

  /** The claim of `claimIn`, once the partitions ahead are made (see `sendClaims`). */
  override async claimIn(
    ...args: Parameters<PostgresClaimStore['claimIn']>
  ): ReturnType<PostgresClaimStore['claimIn']> {
    await this.ensurePartitions();
    try {
      return await super.claimIn(...args);
    } catch (error) {
      if (!isNoPartitionError(causeOf(error))) throw error;
      // Partitions ran out sooner than this process reckoned (see `sendClaims`): made now, and
      // the key claimed apart, whose claim runs once more (its transaction was rolled back).
      this.coveredUntil = undefined;
      await this.createPartitions();
      return { kind: 'apart' };
    }
  }

  protected override claimStatement(): Statement {
    return CLAIM_IN_PARTITIONS;
  }

  /**
   * The claims of a batch through `idempotency_claim()`, once the partitions ahead are made
   * (waited for only when its rows would have none).
   */
  protected override async sendClaims(
    batch: ClaimRequest[],
    late: LateRows,
  ): Promise<(ClaimRow | undefined)[]> {
    await this.ensurePartitions();
    return this.claimRows(batch, CLAIM_IN_PARTITIONS, CLAIM_BATCH_IN_PARTITIONS, late).catch(
      async (error: unknown) => {
        if (!isNoPartitionError(causeOf(error))) throw error;
        // Partitions ran out sooner than this process reckoned (dropped by hand, a clock
        // that jumped): made now, and the claims run once more.
        this.coveredUntil = undefined;
        await this.createPartitions();
        return this.claimRows(batch, CLAIM_IN_PARTITIONS, CLAIM_BATCH_IN_PARTITIONS, late);
      },
    );
  }

  /**
   * The retention, by partitions: makes the partitions ahead, then drops every partition whose
   * whole range is past `retentionMs`, once the keys that must outlive it are carried forward
   * into the live one. Returns no keys: those of a dropped partition are not listed, and none
   * is still in a replay cache (an entry lives at most half its key's remaining retention).
   */
  override async purgeBatch(retentionMs: number): Promise<KeyScope[]> {
    await this.createPartitions();
    const { rows } = await this.query<DetachConditionsRow>(DETACH_CONDITIONS, []);
    const [conditions] = rows;
    conditions.others_pending.forEach((partition, i) =>
      this.warnOtherRolesPendingDetach(
        conditions.keys_table,
        partition,
        conditions.others_pending_owners[i],
      ),
    );
    const mode = detachMode(
      this.database.pooler,
      conditions.has_default,
      conditions.others_pending.length > 0,
    );
    await this.database.withConnection((client) =>
      mode === 'locked'
        ? this.expireInTransactions(client, retentionMs)
        : this.expire(client, retentionMs),
    );
    return [];
  }

  override async purgeAbandonedBatch(horizonMs: number, batchSize: number): Promise<number> {
    const { rowCount } = await this.query(PURGE_ABANDONED_IN_PARTITIONS, [horizonMs, batchSize]);
    return rowCount ?? 0;
  }

  /** Before a claim: the partitions ahead, waited for only when its row would have none. */
  private async ensurePartitions(): Promise<void> {
    const covered =
      this.coveredUntil === undefined ? undefined : this.coveredUntil - performance.now();
    const action = coverageAction(covered, this.layout.partitionMs);
    if (action === 'none') {
      // A hand-over given up (a lock held) is tried again a partition's width later, not at the
      // next claim: a dump holds its lock for minutes, and each try would ask for it again.
      if (
        handOverRetryDue(this.handOverGivenUpAt, performance.now(), this.layout.partitionMs) &&
        this.handingOver === undefined
      ) {
        this.handingOver = this.handOverPartitions().finally(() => (this.handingOver = undefined));
      }
      return;
    }
    const creating = this.createPartitions();
    if (action === 'wait') return creating;
    creating.catch((error: unknown) =>
      this.logger.warn(`partitions ahead of idempotency_keys were not made: ${String(error)}`),
    );
  }

  /** Makes the partitions ahead, one call at a time per process; notes how far they reach. */
  private createPartitions(): Promise<void> {
    this.creating ??= (async () => {
      const asked = performance.now();
      const { rows } = await this.query<{ covered_ms: number }>(CREATE_PARTITIONS, [
        this.layout.partitionMs,
        this.layout.partitionsAhead,
      ]);
      this.coveredUntil = asked + rows[0].covered_ms;
      await this.handOverPartitions();
    })().finally(() => (this.creating = undefined));
    return this.creating;
  }

  /**
   * Gives the partitions this role made to the keys table's owner (`handOvers`), so that the
   * purge of any role that may attach partitions may drop them, not only this role's: left
   * with it, another role's purge empties them row by row and they pile up attached for ever
   * (adversary 111). The ones made before this ran (an earlier release's) go too. Each in a
   * transaction of its own, its lock taken only if free (`HAND_OVER_LOCK_TIMEOUT_MS`); one
   * whose lock is held is passed over, the others still given. A failure is logged, never a
   * claim's, and tried again at the next purge or a partition's width later
   * (`ensurePartitions`). Never throws.
   */
  private async handOverPartitions(): Promise<void> {
    try {
      const { rows } = await this.query<PartitionOwnerRow>(PARTITION_OWNERS, []);
      const steps = handOvers(rows.map(toOwnership));
      this.handOverGivenUpAt = undefined;
      if (steps.length === 0) return;
      const failures: string[] = [];
      await this.database.withConnection(async (client) => {
        for (const step of steps) {
          if (step.kind === 'blocked') {
            this.warnHandOverBlocked(step);
            continue;
          }
          await client.query('BEGIN');
          try {
            const path = this.database.libraryPathNow();
            if (path !== undefined) await client.query(pinSearchPath(path));
            await client.query(`SET LOCAL lock_timeout = ${HAND_OVER_LOCK_TIMEOUT_MS}`);
            // NOWAIT: never a request in the partition's lock queue for claims to wait behind.
            await client.query(`LOCK TABLE ONLY ${step.partition} IN ACCESS EXCLUSIVE MODE NOWAIT`);
            await client.query(`ALTER TABLE ${step.partition} OWNER TO ${quoteName(step.to)}`);
            await client.query('COMMIT');
          } catch (error) {
            await client.query('ROLLBACK').catch(() => undefined);
            failures.push(`${step.partition}: ${String(error)}`);
          }
        }
      });
      if (failures.length > 0) throw new Error(failures.join('; '));
    } catch (error) {
      this.handOverGivenUpAt = performance.now();
      this.logger.warn(
        "partitions of idempotency_keys were not given to the keys table's owner (tried " +
          `again at the next purge, or a partition's width from now): ${String(error)}`,
      );
    }
  }

  /** Once per schema and owner: what to grant so that the partitions can be given. */
  private warnHandOverBlocked(step: { partition: string; schema: string; keysOwner: string }) {
    const key = `${step.schema}\0${step.keysOwner}`;
    if (this.warnedHandOver.has(key)) return;
    this.warnedHandOver.add(key);
    this.logger.warn(
      `partition ${step.partition} of idempotency_keys stays this role's: the keys table's ` +
        `owner ${step.keysOwner} has no CREATE on schema ${step.schema}, which PostgreSQL asks ` +
        "of a table's new owner, so a purge run by another role may not drop it (it deletes " +
        `its keys row by row instead, and the partition stays attached): GRANT CREATE ON SCHEMA ` +
        `${quoteName(step.schema)} TO ${quoteName(step.keysOwner)}; see docs/operations/partitioned-expiry.md`,
    );
  }

  /**
   * Once per partition: another role's detach left pending (`detachMode`), which this role may
   * finish but not drop, so the purge detaches its own partitions under the table's lock; what
   * its owner runs to be rid of it. Its keys are already out of every claim's sight (a partition
   * pending detach is left out of new queries), and the purge that began the detach carried
   * forward those that had to outlive it.
   */
  private warnOtherRolesPendingDetach(keysTable: string, partition: string, owner: string): void {
    if (this.warnedPendingDetach.has(partition)) return;
    this.warnedPendingDetach.add(partition);
    this.logger.warn(
      `partition ${partition} of ${keysTable} has a detach left pending (an interrupted ` +
        `purge) and is owned by ${owner}, which this role may not drop: while it is pending ` +
        'PostgreSQL detaches no other partition CONCURRENTLY, so the purge detaches expired ' +
        `partitions under the table's lock instead (claims wait for it, ${DETACH_LOCK_TIMEOUT_MS} ms ` +
        `at most). As ${owner} (or a superuser): ${pendingDetachRemedy(keysTable, partition)}; ` +
        'see docs/operations/partitioned-expiry.md',
    );
  }

  /** Moves the keys that must outlive a partition into the live one (`CARRY_FORWARD`). */
  private carryForward(
    client: PoolClient,
    step: { fromAt: Date | null; toAt: Date },
    retentionMs: number,
  ): Promise<QueryResult> {
    return client.query(CARRY_FORWARD, [step.fromAt, step.toAt, retentionMs]);
  }

  /**
   * An expired partition this role may not drop (another app role's: `expirySteps`' `empty`):
   * its keys that must outlive it carried forward, the others deleted, the table left attached
   * (detached, it could not be dropped, and nothing would ever look at it again), and a warning
   * that says how to let the expiry drop it.
   */
  private async empty(
    client: PoolClient,
    step: { partition: string; fromAt: Date | null; toAt: Date; owner?: string },
    retentionMs: number,
  ): Promise<void> {
    await this.carryForward(client, step, retentionMs);
    const deleted = await client.query(DELETE_EXPIRED_IN_PARTITION, [
      step.fromAt,
      step.toAt,
      retentionMs,
    ]);
    if (this.warnedUndroppable.has(step.partition)) return;
    this.warnedUndroppable.add(step.partition);
    this.logger.warn(
      `partition ${step.partition} of idempotency_keys is past the retention but owned by ` +
        `${step.owner ?? 'another role'}, which this role may not drop: ` +
        `${deleted.rowCount ?? 0} expired keys deleted from it row by row instead (dead ` +
        "tuples for vacuum). Its maker's sessions give it to the keys table's owner, so " +
        'that any purge drops it, once that owner has CREATE on its schema (GRANT CREATE ON ' +
        'SCHEMA ... TO <it>); if they no longer run (credentials rotated to a new role), no ' +
        'other role may give it: as a superuser or its owner, ALTER TABLE ' +
        `${step.partition} OWNER TO <it> (nestjs-idempotency-pg doctor prints the ` +
        'statements); see docs/operations/partitioned-expiry.md',
    );
  }

  /** One instance at a time (a session lock; the others skip): the steps of `expirySteps`. */
  private async expire(client: PoolClient, retentionMs: number): Promise<void> {
    const { rows } = await client.query<{ locked: boolean }>(
      withLibraryTypes({
        text: 'SELECT pg_try_advisory_lock(hashtextextended($1, 0)) AS locked',
        values: [EXPIRY_LOCK],
      }),
    );
    if (!rows[0].locked) return;
    // The library's search path for the session's statements here (not the one a pooled
    // connection was left on), the session's own put back after them.
    const path = this.database.libraryPathNow();
    const { rows: was } =
      path === undefined
        ? { rows: [] }
        : await client.query<{ path: string }>(
            withLibraryTypes({
              text: "SELECT current_setting('search_path') AS path, set_config('search_path', $1, false)",
              values: [path],
            }),
          );
    try {
      await client.query(`SET statement_timeout = ${MAINTENANCE_STATEMENT_TIMEOUT_MS}`);
      const [{ rows: partitions }, { rows: clock }] = await Promise.all([
        client.query<PartitionRow>(withLibraryTypes({ text: LIST_PARTITIONS })),
        client.query<ClockRow>(withLibraryTypes({ text: PARTITION_CLOCK })),
      ]);
      for (const step of expirySteps(partitions.map(toInfo), clockOf(clock), retentionMs)) {
        if (step.kind === 'empty') {
          await this.empty(client, step, retentionMs);
          continue;
        }
        if (step.kind === 'finalize') {
          await client.query(
            `ALTER TABLE idempotency_keys DETACH PARTITION ${step.partition} FINALIZE`,
          );
        } else {
          const carried = await this.carryForward(client, step, retentionMs);
          // CONCURRENTLY: claims go on while it waits for the queries still reading the
          // partition; a plain DETACH or DROP would lock them all out meanwhile.
          await client.query(
            `ALTER TABLE idempotency_keys DETACH PARTITION ${step.partition} CONCURRENTLY`,
          );
          this.logger.log(
            `dropping partition ${step.partition} of idempotency_keys (past the retention); ` +
              `${carried.rowCount ?? 0} keys carried forward`,
          );
        }
        await client.query(`DROP TABLE ${step.partition}`);
      }
    } finally {
      await client.query('RESET statement_timeout');
      if (was[0]) {
        await client.query("SELECT set_config('search_path', $1, false)", [was[0].path]);
      }
      await client.query('SELECT pg_advisory_unlock(hashtextextended($1, 0))', [EXPIRY_LOCK]);
    }
  }

  /**
   * The expiry with locked detaches (`detachMode`): behind a pooler in transaction mode, on a
   * table with a DEFAULT partition, or beside another role's pending detach. Behind such a pooler each transaction may run on another
   * server session: a session lock would stay held on the session that took it (the unlock
   * runs on another), and a session setting would reach other clients' statements. So each
   * partition goes in one transaction of its own, under a transaction-level lock (the other
   * instances skip), with its timeouts `SET LOCAL`; its detach cannot be `CONCURRENTLY` (which
   * runs outside any transaction), and takes the table's lock first, so that no lock it holds
   * on a carried row is ever upgraded while a claim waits on it.
   */
  private async expireInTransactions(client: PoolClient, retentionMs: number): Promise<void> {
    // The partitions emptied (not dropped) in this purge: they are still listed after.
    const emptied = new Set<string>();
    for (;;) {
      await client.query('BEGIN');
      let more: boolean;
      try {
        // The library's search path, for this transaction alone.
        const path = this.database.libraryPathNow();
        if (path !== undefined) await client.query(pinSearchPath(path));
        more = await this.expireOne(client, retentionMs, emptied);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw error;
      }
      if (!more) return;
    }
  }

  /** In a transaction: the first step of `expirySteps`, if the lock is free; whether it ran. */
  private async expireOne(
    client: PoolClient,
    retentionMs: number,
    emptied: Set<string>,
  ): Promise<boolean> {
    const { rows } = await client.query<{ locked: boolean }>(
      withLibraryTypes({
        text: 'SELECT pg_try_advisory_xact_lock(hashtextextended($1, 0)) AS locked',
        values: [EXPIRY_LOCK],
      }),
    );
    if (!rows[0].locked) return false;
    await client.query(`SET LOCAL statement_timeout = ${MAINTENANCE_STATEMENT_TIMEOUT_MS}`);
    await client.query(`SET LOCAL lock_timeout = ${DETACH_LOCK_TIMEOUT_MS}`);
    const { rows: partitions } = await client.query<PartitionRow>(
      withLibraryTypes({ text: LIST_PARTITIONS }),
    );
    const { rows: clock } = await client.query<ClockRow>(
      withLibraryTypes({ text: PARTITION_CLOCK }),
    );
    const step = expirySteps(partitions.map(toInfo), clockOf(clock), retentionMs).find(
      (next) => !emptied.has(next.partition),
    );
    if (step === undefined) return false;
    if (step.kind === 'empty') {
      // No detach, so no table lock: rows deleted as claims go on.
      emptied.add(step.partition);
      await this.empty(client, step, retentionMs);
      return true;
    }
    await client.query('LOCK TABLE idempotency_keys IN ACCESS EXCLUSIVE MODE');
    if (step.kind === 'finalize') {
      await client.query(
        `ALTER TABLE idempotency_keys DETACH PARTITION ${step.partition} FINALIZE`,
      );
    } else {
      const carried = await this.carryForward(client, step, retentionMs);
      await client.query(`ALTER TABLE idempotency_keys DETACH PARTITION ${step.partition}`);
      this.logger.log(
        `dropping partition ${step.partition} of idempotency_keys (past the retention); ` +
          `${carried.rowCount ?? 0} keys carried forward`,
      );
    }
    await client.query(`DROP TABLE ${step.partition}`);
    return true;
  }
}

function toInfo(row: PartitionRow): PartitionInfo {
  return {
    partition: row.partition,
    fromAt: dateOfEpochMs(row.from_ms),
    toAt: dateOfEpochMs(row.to_ms),
    detachPending: row.detach_pending,
    droppable: row.droppable ?? undefined,
    owner: row.owner ?? undefined,
  };
}

function toOwnership(row: PartitionOwnerRow): PartitionOwnership {
  return {
    partition: row.partition,
    schema: row.schema,
    owner: row.owner,
    keysOwner: row.keys_owner,
    ours: row.ours,
    memberOfKeysOwner: row.member_of_keys_owner,
    keysOwnerMayCreate: row.keys_owner_may_create,
  };
}

interface ClockRow {
  now_ms: string;
}

/** `PARTITION_CLOCK`'s time. */
function clockOf(rows: readonly ClockRow[]): Date {
  return dateOfEpochMs(rows[0].now_ms) ?? new Date(NaN);
}

/** The database's own error under the library's 503. */
function causeOf(error: unknown): unknown {
  return error instanceof IdempotencyStoreUnavailableError ? error.cause : error;
}
