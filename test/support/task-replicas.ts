import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS } from '../../lib/index.js';
import { createTestDatabase, type TestDatabase } from './database.js';
import { type ReadyProcess, startReadyProcess } from './ready-process.js';

/** A replica process of test/support/task-replica.ts. */
export type TaskReplica = ReadyProcess;

/** A tick's row, as a replica recorded it. */
export interface TickRow {
  slot: string;
  replica: string;
  resumed: boolean;
  transfer: string | null;
}

/** What a scheduled-task test works with: its replicas and the rows their ticks wrote. */
export interface TaskReplicas {
  /** Starts a replica with `env` (see task-replica.ts); resolves once its timers run. */
  start(env: Record<string, string>): Promise<TaskReplica>;
  /** Every tick's row, by slot. */
  ticks(): Promise<TickRow[]>;
  /** The library's unfinished tick keys (a tick neither done nor forgotten). */
  unfinished(): Promise<string[]>;
  /** The ticks at work whose call out is recorded (its phase): after their call, before their row. */
  recordedCalls(): Promise<string[]>;
  /** The answers kept of the ticks that failed (their keys done, 500). */
  failures(): Promise<string[]>;
  /** Empties `ticks` and the library's keys, between tests. */
  reset(): Promise<void>;
  /** The database's URL. */
  url(): string;
}

/**
 * A PostgreSQL database of the test file's own (the library's migrations run, and a `ticks`
 * table), its replicas killed after each test.
 */
export function useTaskReplicas(label: string): TaskReplicas {
  let database: TestDatabase;
  let admin: Client;
  const replicas: TaskReplica[] = [];

  beforeAll(async () => {
    database = await createTestDatabase(label);
    // Migrated here: a replica on the pool seam runs no migrations of its own.
    const migrations = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
    });
    await migrations.initialize();
    await migrations.runMigrations();
    await migrations.destroy();
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(
      `CREATE TABLE ticks (id serial PRIMARY KEY, slot timestamptz NOT NULL,
         replica text NOT NULL, resumed boolean NOT NULL, transfer text)`,
    );
  }, 60_000);

  afterEach(async () => {
    await Promise.all(replicas.splice(0).map((replica) => replica.kill()));
  });

  afterAll(async () => {
    await admin?.end();
    await database?.drop();
  });

  return {
    async start(env) {
      const replica = await startReadyProcess(
        'test/support/task-replica.js',
        { DATABASE_URL: database.url, ...env },
        'the replica to start',
      );
      replicas.push(replica);
      return replica;
    },
    async ticks() {
      const { rows } = await admin.query<TickRow>(
        `SELECT to_char(slot AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"') AS slot,
           replica, resumed, transfer FROM ticks ORDER BY slot, id`,
      );
      return rows;
    },
    async unfinished() {
      const { rows } = await admin.query<{ key: string }>(
        "SELECT key FROM idempotency_keys WHERE tenant_id LIKE 'schedule:%' AND state = 'started'",
      );
      return rows.map((row) => row.key);
    },
    async recordedCalls() {
      // Ticks at work whose call out's phase is recorded: after their call, before their row.
      const { rows } = await admin.query<{ key: string }>(
        `SELECT key FROM idempotency_keys WHERE tenant_id LIKE 'schedule:%' AND state = 'started'
           AND phase_results <> '{}'::jsonb`,
      );
      return rows.map((row) => row.key);
    },
    async failures() {
      const { rows } = await admin.query<{ body: string }>(
        `SELECT convert_from(response_body, 'UTF8') AS body FROM idempotency_keys
         WHERE tenant_id LIKE 'schedule:%' AND state = 'done' AND response_code = 500`,
      );
      return rows.map((row) => row.body);
    },
    url: () => database.url,
    async reset() {
      await admin.query('TRUNCATE ticks; DELETE FROM idempotency_keys');
    },
  };
}
