import { Logger } from '@nestjs/common';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { PartitionIdempotencyKeys1764461600000 } from '../lib/index.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { PartitionedPostgresClaimStore } from '../lib/claim/partitioned/partitioned-postgres-claim.store.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { partitionOf, partitions, untilDatabaseTime } from './support/partitions.js';
import { startPgBouncer, type TestPgBouncer } from './support/pgbouncer.js';
import { describePartitioned } from './support/postgres-version.js';

/**
 * The partitioned store behind a real PgBouncer in transaction mode: its claims (a function
 * that takes a transaction-level advisory lock) and its expiry, whose one-instance-at-a-time
 * lock and statement timeout must not stay on whichever server session ran them. Three server
 * connections, used in turn: the statements of one purge land on all of them.
 */
if (!process.env.TEST_LOGS) Logger.overrideLogger(false);

const PARTITION_MS = 1000;
const RETENTION_MS = 1500;
const SERVER_CONNECTIONS = 3;
const fingerprint = Buffer.alloc(32, 7);

describePartitioned('the partitioned store behind PgBouncer in transaction mode', () => {
  let database: MigratedDatabase;
  let bouncer: TestPgBouncer;
  /** The store's DataSource, through PgBouncer. */
  let pooled: DataSource;
  /** A direct session, to see what the server sessions hold. */
  let direct: Client;
  const newStore = () =>
    new PartitionedPostgresClaimStore(new IdempotencyDatabase(() => pooled, 5000, 'transaction'), {
      partitionMs: PARTITION_MS,
      partitionsAhead: 2,
    });

  beforeAll(async () => {
    database = await createMigratedDatabase('pgbouncer_partitions', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    bouncer = await startPgBouncer({ poolMode: 'transaction', poolSize: SERVER_CONNECTIONS });
    const name = new URL(database.url).pathname.slice(1);
    pooled = new DataSource({ type: 'postgres', url: bouncer.url(name), extra: { max: 10 } });
    await pooled.initialize();
    direct = new Client({ connectionString: database.url });
    await direct.connect();
    // Every server connection opened now, so that the statements of each test take turns on
    // all of them (PgBouncer opens one only when none is idle).
    await serverTimeouts();
  });
  afterAll(async () => {
    await pooled?.destroy();
    await direct?.end();
    await bouncer?.stop();
    await database?.drop();
  });

  /** Advisory locks held by any session of the test's database. */
  const advisoryLocks = async () =>
    (
      await direct.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_locks l JOIN pg_database d ON d.oid = l.database
         WHERE l.locktype = 'advisory' AND d.datname = current_database()`,
      )
    ).rows[0].n;
  /**
   * `statement_timeout` as each server session has it: as many transactions at once as there
   * are server connections, each holding its own until all have read it.
   */
  const serverTimeouts = async () => {
    const clients = await Promise.all(
      Array.from({ length: SERVER_CONNECTIONS }, () => pooled.createQueryRunner()),
    );
    try {
      await Promise.all(clients.map((runner) => runner.startTransaction()));
      const seen = await Promise.all(
        clients.map(async (runner) => {
          const [{ pid }] = (await runner.query('SELECT pg_backend_pid() AS pid')) as {
            pid: number;
          }[];
          const [{ statement_timeout: timeout }] = (await runner.query(
            'SHOW statement_timeout',
          )) as { statement_timeout: string }[];
          return { pid, timeout };
        }),
      );
      await Promise.all(clients.map((runner) => runner.commitTransaction()));
      return seen;
    } finally {
      await Promise.all(clients.map((runner) => runner.release()));
    }
  };
  const claim = async (store: PartitionedPostgresClaimStore, key: string) => {
    const outcome = await store.claim({ tenantId: 'p', key }, fingerprint, 60_000);
    if (outcome.kind !== 'claimed') throw new Error(`key ${key} was not free`);
    return outcome.claim;
  };
  const untilExpired = async (partition: string) => {
    const bounds = (await partitions(pooled)).find((p) => p.name === partition);
    if (!bounds?.toAt) throw new Error(`no partition ${partition}`);
    await untilDatabaseTime(pooled, new Date(bounds.toAt.getTime() + RETENTION_MS + 50));
  };

  it('claims, finishes and replays keys from many connections at once', async () => {
    const store = newStore();
    const keys = Array.from({ length: 20 }, (_, i) => `many-${i}`);
    const claims = await Promise.all(keys.map((key) => claim(store, key)));
    const finished = await Promise.all(
      claims.map((c) =>
        store.finish(c, { status: 201, headers: {}, body: Buffer.from(`done ${c.key}`) }),
      ),
    );
    expect(finished).toEqual(keys.map(() => true));
    const again = await Promise.all(
      keys.map((key) => store.claim({ tenantId: 'p', key }, fingerprint, 60_000)),
    );
    expect(
      again.map((o) => (o.kind === 'existing' && o.existing.state === 'done' ? 'done' : o.kind)),
    ).toEqual(keys.map(() => 'done'));
  });

  it('drops an expired partition, keeps its unfinished key, and leaves no lock nor setting on any server session', async () => {
    const store = newStore();
    await claim(store, 'unfinished');
    const finished = await claim(store, 'finished');
    await store.finish(finished, { status: 201, headers: {}, body: Buffer.from('{}') });
    const partition = (await partitionOf(pooled, 'finished'))!;
    await untilExpired(partition);

    await store.purgeBatch(RETENTION_MS);

    expect((await partitions(pooled)).map((p) => p.name)).not.toContain(partition);
    expect(await partitionOf(pooled, 'finished')).toBeUndefined();
    expect(await partitionOf(pooled, 'unfinished')).toBeDefined();
    expect(await advisoryLocks()).toBe(0);
    const timeouts = await serverTimeouts();
    expect(new Set(timeouts.map((t) => t.pid)).size).toBe(SERVER_CONNECTIONS);
    expect(timeouts.map((t) => t.timeout)).toEqual(timeouts.map(() => '0'));
  });

  it('lets several instances purge at once: each partition dropped by one, no lock left', async () => {
    const store = newStore();
    await claim(store, 'concurrent');
    const partition = (await partitionOf(pooled, 'concurrent'))!;
    await untilExpired(partition);
    const instances = [newStore(), newStore(), newStore()];
    await Promise.all(instances.map((instance) => instance.purgeBatch(RETENTION_MS)));
    expect((await partitions(pooled)).map((p) => p.name)).not.toContain(partition);
    expect(await partitionOf(pooled, 'concurrent')).toBeDefined();
    expect(await advisoryLocks()).toBe(0);
    // And the next purge still runs: the lock is not held by a server session left behind.
    await claim(store, 'next');
    const next = (await partitionOf(pooled, 'next'))!;
    await untilExpired(next);
    await newStore().purgeBatch(RETENTION_MS);
    expect((await partitions(pooled)).map((p) => p.name)).not.toContain(next);
  });
});
