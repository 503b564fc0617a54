import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Client } from 'pg';
import { DataSource } from 'typeorm';
import { decide } from '../../lib/decisions/decide.js';
import { IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000 } from '../../lib/index.js';
import { IdempotencyDatabase } from '../../lib/data-layers/idempotency-database.js';
import { PostgresClaimStore } from '../../lib/claim/postgres-claim.store.js';
import { unboundedPartitionProblem } from '../../lib/schema/schema-check.js';
import { runCli, startCli, printed } from '../support/cli-process.js';
import { adminUrl, createTestDatabase, type TestDatabase } from '../support/database.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/migrated-database.js';

/**
 * The operator's command, compiled and run as a user runs it (`--url`), against real databases
 * each with one problem: its exact output and exit code for each.
 */

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const SCHEMA_OK = 'ok    schema: 4 tables as the library expects (idempotency_keys plain)';
const MIGRATIONS_OK = "ok    migrations: the library's 8 have run";
const SYNC_OK = 'ok    synchronous_commit: on';
const STATEMENT_OK = 'ok    statement_timeout: none (the library bounds its own calls)';
const LOCK_OK = 'ok    lock_timeout: none (the library bounds its own calls)';
const PLAIN_OK = 'ok    partitions: plain table (no partitioned expiry)';
const KEYS_OK = 'ok    keys: none stuck (lease expired over 1 min ago)';

let maxConnections: number;
const poolOk = () =>
  `ok    pool: 1 × 10 connections within max_connections ${maxConnections} (3 reserved)`;

beforeAll(async () => {
  const client = new Client({ connectionString: process.env.TEST_DATABASE_URL });
  await client.connect();
  const { rows } = await client.query<{ max_connections: string }>('SHOW max_connections');
  maxConnections = Number(rows[0].max_connections);
  await client.end();
});

describe('doctor', () => {
  const databases: { drop(): Promise<void> }[] = [];
  afterAll(async () => {
    for (const database of databases) await database.drop();
  });
  const migrated = async (
    label: string,
    extra = [] as (typeof IDEMPOTENCY_MIGRATIONS)[number][],
  ) => {
    const database = await createMigratedDatabase(label, extra);
    databases.push(database);
    return database;
  };

  it('a healthy database: every check ok, exit 0', async () => {
    const { url } = await migrated('doctor_healthy');
    const run = await runCli(['doctor', '--url', url]);
    expect(run.stdout).toBe(
      [SCHEMA_OK, MIGRATIONS_OK, SYNC_OK, STATEMENT_OK, LOCK_OK, poolOk(), PLAIN_OK, KEYS_OK]
        .concat('No problems found.', '')
        .join('\n'),
    );
    expect(run.stderr).toBe('');
    expect(run.code).toBe(0);
  });

  it('a database made with schema.sql (the pg.Pool set-up): every check ok, no warning, exit 0', async () => {
    const database: TestDatabase = await createTestDatabase('doctor_schema_sql');
    databases.push(database);
    const client = new Client({ connectionString: database.url });
    await client.connect();
    await client.query(readFileSync('migrations/schema.sql', 'utf8')).finally(() => client.end());
    const run = await runCli(['doctor', '--url', database.url]);
    expect(run.stdout).toBe(
      [
        SCHEMA_OK,
        'ok    migrations: no table "migrations", and none needed: the schema is complete (made ' +
          'with schema.sql or by hand); a TypeORM app whose migrations table has another ' +
          'name: --migrations-table',
        SYNC_OK,
        STATEMENT_OK,
        LOCK_OK,
        poolOk(),
        PLAIN_OK,
        KEYS_OK,
        'No problems found.',
        '',
      ].join('\n'),
    );
    expect(run.code).toBe(0);
  });

  it('no migrations run: the missing tables and the migrations to run, exit 1', async () => {
    const database: TestDatabase = await createTestDatabase('doctor_empty');
    databases.push(database);
    const run = await runCli(['doctor', '--url', database.url]);
    expect(run.stdout).toBe(
      [
        'FAIL  schema: missing tables idempotency_keys, processed_messages, message_failures, ' +
          "idempotency_response_bodies: run the library's migrations (on a pg.Pool: " +
          "migrations/schema.sql; on TypeORM: IDEMPOTENCY_MIGRATIONS in the DataSource's " +
          'migrations)',
        'FAIL  migrations: no table "migrations": none of the library\'s 8 migrations has run ' +
          '(on a pg.Pool: apply migrations/schema.sql; on TypeORM: add IDEMPOTENCY_MIGRATIONS ' +
          "to the DataSource's migrations, with migrationsRun: true or `typeorm " +
          'migration:run`); another table name: --migrations-table',
        SYNC_OK,
        STATEMENT_OK,
        LOCK_OK,
        poolOk(),
        '2 problems, 0 warnings.',
        '',
      ].join('\n'),
    );
    expect(run.code).toBe(1);
  });

  it('migrations pending: the columns they add or change, and their names, exit 1', async () => {
    const database = await createTestDatabase('doctor_pending');
    const pending = ['AddFinishedAt1764461200000', 'TextTenantIds1764461300000'];
    const dataSource = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: IDEMPOTENCY_MIGRATIONS.filter((m) => !pending.includes(new m().name!)),
    });
    await dataSource.initialize();
    await dataSource.runMigrations();
    await dataSource.destroy();
    databases.push(database);

    const run = await runCli(['doctor', '--url', database.url]);
    expect(run.stdout).toBe(
      [
        'FAIL  schema: idempotency_keys.tenant_id is bigint, not text; idempotency_keys.finished_at ' +
          "(timestamp with time zone) is missing: run the library's pending migrations",
        "FAIL  migrations: 2 of the library's 8 pending: AddFinishedAt1764461200000, " +
          "TextTenantIds1764461300000 (run them: IDEMPOTENCY_MIGRATIONS in the DataSource's " +
          'migrations)',
        SYNC_OK,
        STATEMENT_OK,
        LOCK_OK,
        poolOk(),
        PLAIN_OK,
        KEYS_OK,
        '2 problems, 0 warnings.',
        '',
      ].join('\n'),
    );
    expect(run.code).toBe(1);
  });

  it('a role without USAGE on the schema of the tables: the GRANT, not the migrations, exit 1', async () => {
    // The tables and the migrations table in schema idem, which the role's search_path names:
    // PostgreSQL leaves a schema the role may not use out of the path, so they look missing.
    const database = await createTestDatabase('doctor_usage');
    const admin = new Client({ connectionString: database.url });
    await admin.connect();
    const role = `idem_doctor_${randomBytes(3).toString('hex')}`;
    try {
      await admin.query('CREATE SCHEMA idem');
      const inIdem = new URL(database.url);
      inIdem.searchParams.set('options', '-c search_path=idem');
      const dataSource = new DataSource({
        type: 'postgres',
        url: inIdem.toString(),
        migrations: IDEMPOTENCY_MIGRATIONS,
      });
      await dataSource.initialize();
      await dataSource.runMigrations();
      await dataSource.destroy();
      await admin.query(`CREATE ROLE ${role} LOGIN PASSWORD 'doctor'`);
      await admin.query(`GRANT CONNECT ON DATABASE ${database.name} TO ${role}`);
      await admin.query(
        `ALTER ROLE ${role} IN DATABASE ${database.name} SET search_path = idem, public`,
      );
      await admin.query(
        `GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA idem TO ${role}`,
      );
      const url = new URL(database.url);
      url.username = role;
      url.password = 'doctor';
      const run = await runCli(['doctor', '--url', url.toString()]);
      expect(run.stdout).toBe(
        [
          `FAIL  schema: the role ${role} may not use schema idem, which holds idempotency_keys, ` +
            'processed_messages, message_failures, idempotency_response_bodies: ' +
            `GRANT USAGE ON SCHEMA idem TO ${role}`,
          `FAIL  migrations: the role ${role} may not use schema idem, which holds migrations: ` +
            `GRANT USAGE ON SCHEMA idem TO ${role}`,
          SYNC_OK,
          STATEMENT_OK,
          LOCK_OK,
          poolOk(),
          '2 problems, 0 warnings.',
          '',
        ].join('\n'),
      );
      expect(run.code).toBe(1);

      await admin.query(`GRANT USAGE ON SCHEMA idem TO ${role}`);
      const granted = await runCli(['doctor', '--url', url.toString()]);
      expect(granted.stdout).toBe(
        [SCHEMA_OK, MIGRATIONS_OK, SYNC_OK, STATEMENT_OK, LOCK_OK, poolOk(), PLAIN_OK, KEYS_OK]
          .concat('No problems found.', '')
          .join('\n'),
      );
    } finally {
      await admin.query(`DROP OWNED BY ${role}`);
      await admin.end();
      await database.drop();
      const server = new Client({ connectionString: adminUrl() });
      await server.connect();
      await server.query(`DROP ROLE IF EXISTS ${role}`);
      await server.end();
    }
  });

  it('a DEFAULT dropped and a role that may not UPDATE: what the app would refuse to start for, exit 1', async () => {
    // The tables and columns all there, with their types: before, "ok schema", and the app
    // then refused to start (or every claim failed 23502).
    const database = await migrated('doctor_beyond_columns');
    const name = new URL(database.url).pathname.slice(1);
    const role = `idem_doctor_${randomBytes(3).toString('hex')}`;
    try {
      await database.dataSource.query(
        'ALTER TABLE idempotency_keys ALTER COLUMN claim_id DROP DEFAULT',
      );
      await database.dataSource.query(`CREATE ROLE ${role} LOGIN PASSWORD 'doctor'`);
      await database.dataSource.query(`GRANT CONNECT ON DATABASE ${name} TO ${role}`);
      await database.dataSource.query(`GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}`);
      await database.dataSource.query(`REVOKE UPDATE ON idempotency_keys FROM ${role}`);
      const url = new URL(database.url);
      url.username = role;
      url.password = 'doctor';
      const run = await runCli(['doctor', '--url', url.toString()]);
      expect(run.stdout).toBe(
        [
          'FAIL  schema: column idempotency_keys.claim_id has no DEFAULT, which the insert ' +
            `needs (migration CreateIdempotencyKeys1764460800000); the role ${role} may not ` +
            `UPDATE on idempotency_keys: GRANT SELECT, INSERT, UPDATE, DELETE ON ` +
            `idempotency_keys TO ${role}`,
          MIGRATIONS_OK,
          SYNC_OK,
          STATEMENT_OK,
          LOCK_OK,
          poolOk(),
          PLAIN_OK,
          KEYS_OK,
          '1 problem, 0 warnings.',
          '',
        ].join('\n'),
      );
      expect(run.code).toBe(1);
    } finally {
      // The database itself is dropped with the others (afterAll).
      await database.dataSource.query(`DROP OWNED BY ${role}`);
      const server = new Client({ connectionString: adminUrl() });
      await server.connect();
      await server.query(`DROP ROLE IF EXISTS ${role}`);
      await server.end();
    }
  });

  describe('settings of the database', () => {
    let database: MigratedDatabase;
    let name: string;
    beforeAll(async () => {
      database = await migrated('doctor_settings');
      name = new URL(database.url).pathname.slice(1);
    });
    afterEach(async () => {
      await database.dataSource.query(`ALTER DATABASE ${name} RESET ALL`);
    });

    it('synchronous_commit off on the database: how to turn it back on, exit 1', async () => {
      await database.dataSource.query(`ALTER DATABASE ${name} SET synchronous_commit = off`);
      const run = await runCli(['doctor', '--url', database.url]);
      expect(run.stdout).toBe(
        [
          SCHEMA_OK,
          MIGRATIONS_OK,
          'FAIL  synchronous_commit: off: a claim or a stored response the app was told had ' +
            'committed can vanish in a crash, and its request then runs again; turn it back on: ' +
            `ALTER DATABASE ${name} RESET synchronous_commit`,
          STATEMENT_OK,
          LOCK_OK,
          poolOk(),
          PLAIN_OK,
          KEYS_OK,
          '1 problem, 0 warnings.',
          '',
        ].join('\n'),
      );
      expect(run.code).toBe(1);
    });

    it('statement_timeout longer than the lease: exit 1; within a longer lease: ok', async () => {
      await database.dataSource.query(`ALTER DATABASE ${name} SET statement_timeout = '30s'`);
      // Two runs that only read the database: at once.
      const [tooLong, within] = await Promise.all([
        runCli(['doctor', '--url', database.url, '--lease-ms', '5000']),
        runCli(['doctor', '--url', database.url, '--lease-ms', '60000']),
      ]);
      expect(tooLong.stdout).toBe(
        [
          SCHEMA_OK,
          MIGRATIONS_OK,
          SYNC_OK,
          'FAIL  statement_timeout: 30 s, longer than the lease (5 s): a statement blocked that ' +
            'long outlives the lease unless a heartbeat renews it, another request takes the key ' +
            "over and the blocked worker's work is thrown away; set it below the lease, or give " +
            "--lease-ms the app's leaseMs",
          LOCK_OK,
          poolOk(),
          PLAIN_OK,
          KEYS_OK,
          '1 problem, 0 warnings.',
          '',
        ].join('\n'),
      );
      expect(tooLong.code).toBe(1);

      expect(within.stdout).toContain('ok    statement_timeout: 30 s, within the lease (1 min)\n');
      expect(within.code).toBe(0);
    });

    it('a pool smaller than the concurrency, or pools beyond max_connections: exit 1', async () => {
      const instances = String(Math.ceil(maxConnections / 10));
      // Three runs that only read the database: at once.
      const [small, many, fits] = await Promise.all([
        runCli(['doctor', '--url', database.url, '--concurrency', '50']),
        runCli(['doctor', '--url', database.url, '--instances', instances]),
        runCli(['doctor', '--url', database.url, '--concurrency', '10']),
      ]);
      expect(small.stdout).toContain(
        'FAIL  pool: 50 requests at once on a pool of 10: each holds a connection for its ' +
          "claim and its transaction, so 40 wait for one and answer 503 after the library's " +
          "databaseTimeoutMs; raise the pool (max of the app's pg.Pool, or extra.max of a " +
          'TypeORM DataSource) or lower the concurrency\n',
      );
      expect(small.code).toBe(1);

      expect(many.stdout).toContain(
        `FAIL  pool: ${instances} × 10 connections = ${Number(instances) * 10}, more than the ` +
          `server's max_connections (${maxConnections}, 3 reserved): under load some instances ` +
          'cannot connect and answer 503; lower the pools or raise max_connections\n',
      );
      expect(many.code).toBe(1);

      expect(fits.stdout).toContain(
        `ok    pool: 1 × 10 connections within max_connections ${maxConnections} (3 reserved), ` +
          '10 requests at once\n',
      );
      expect(fits.code).toBe(0);
    });
  });

  it('a partitioned table with no partition ahead of the live one: exit 1; two ahead: ok', async () => {
    const { dataSource, url } = await migrated('doctor_partitions', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    // Day-wide partitions: the live one does not end while the test runs (but at midnight UTC).
    await dataSource.query('SELECT idempotency_keys_create_partitions(86400000, 0)');
    const low = await runCli(['doctor', '--url', url]);
    expect(low.stdout).toBe(
      [
        'ok    schema: 4 tables as the library expects (idempotency_keys partitioned)',
        MIGRATIONS_OK,
        SYNC_OK,
        STATEMENT_OK,
        LOCK_OK,
        poolOk(),
        'FAIL  partitions: none ahead of the live one: when it ends, claims wait while the next ' +
          "is made; the app's purge makes them ahead (partitionedExpiry): check that it runs",
        KEYS_OK,
        '1 problem, 0 warnings.',
        '',
      ].join('\n'),
    );
    expect(low.code).toBe(1);

    await dataSource.query('SELECT idempotency_keys_create_partitions(86400000, 2)');
    const ahead = await runCli(['doctor', '--url', url]);
    expect(ahead.stdout).toContain('ok    partitions: 2 ahead of the live one, 1 d wide\n');
    expect(ahead.stdout).toMatch(/No problems found\.\n$/);
    expect(ahead.code).toBe(0);
  });

  it("a partition up to 'infinity' (read as MAXVALUE): what the app would refuse to start for, exit 1", async () => {
    const { dataSource, url } = await migrated('doctor_partition_infinity', [
      PartitionIdempotencyKeys1764461600000,
    ]);
    await dataSource.query('SELECT idempotency_keys_create_partitions(86400000, 1)');
    await dataSource.query(`DO $$ BEGIN
      EXECUTE format('CREATE TABLE idempotency_keys_rest PARTITION OF idempotency_keys '
        'FOR VALUES FROM (%L) TO (''infinity'')',
        (SELECT max(to_at) FROM idempotency_key_partitions()));
    END $$`);
    const run = await runCli(['doctor', '--url', url]);
    // The start-up check's words, and the partitions finding: one story (adversary 109).
    expect(run.stdout).toContain(
      unboundedPartitionProblem('public.idempotency_keys_rest', 'public'),
    );
    expect(run.stdout).toContain(
      "FAIL  partitions: one never ends (MAXVALUE or 'infinity'): no partition is made ahead " +
        'once it is live, and the expiry never drops it; the app refuses to start: detach it ' +
        '(the schema finding names it)\n',
    );
    expect(run.code).toBe(1);
  });

  it('a database it cannot reach: the URL without its password and the error, exit 1', async () => {
    const run = await runCli(['doctor', '--url', 'postgres://app:secret@127.0.0.1:1/app']);
    expect(run.stdout).toBe(
      'FAIL  connection: postgres://app:***@127.0.0.1:1/app: connect ECONNREFUSED 127.0.0.1:1\n' +
        '1 problem, 0 warnings.\n',
    );
    expect(run.code).toBe(1);
  });

  it.each([
    [
      '?password=',
      'postgres://app@127.0.0.1:1/app?password=secret',
      'postgres://app@127.0.0.1:1/app?password=***',
    ],
    [
      '&password=, percent-encoded',
      'postgres://app@127.0.0.1:1/app?sslmode=disable&password=s%65cret',
      'postgres://app@127.0.0.1:1/app?sslmode=disable&password=***',
    ],
    [
      'user:pass@ and ?password= at once',
      'postgres://app:secret@127.0.0.1:1/app?password=secret',
      'postgres://app:***@127.0.0.1:1/app?password=***',
    ],
  ])('never prints a password given as %s (doctor and keys list)', async (_form, url, shown) => {
    const [doctor, list] = await Promise.all([
      runCli(['doctor', '--url', url]),
      runCli(['keys', 'list', '--url', url]),
    ]);
    expect(doctor.stdout).toBe(
      `FAIL  connection: ${shown}: connect ECONNREFUSED 127.0.0.1:1\n1 problem, 0 warnings.\n`,
    );
    expect(doctor.code).toBe(1);
    expect(list.stderr).toBe(`${shown}: connect ECONNREFUSED 127.0.0.1:1\n`);
    expect(list.code).toBe(1);
    for (const run of [doctor, list])
      expect(run.stdout + run.stderr).not.toMatch(/secret|s%65cret/);
  });

  it('no URL, or an unknown command: the usage, exit 2', async () => {
    const [noUrl, unknown] = await Promise.all([
      runCli(['doctor']),
      runCli(['cure', '--url', 'postgres://x']),
    ]);
    expect(noUrl.stderr).toMatch(/^no database: give --url, or set DATABASE_URL\n\nUsage: /);
    expect(noUrl.code).toBe(2);
    expect(unknown.stderr).toMatch(/^unknown command "cure"\n\nUsage: /);
    expect(unknown.code).toBe(2);
  });
});

describe('keys', () => {
  let database: MigratedDatabase;
  let store: PostgresClaimStore;
  const fp = Buffer.alloc(32, 7);

  /** A key seeded at a given state, its times relative to the database's clock. */
  const seed = (
    key: string,
    fields: {
      state?: string;
      recoveryPoint?: string;
      phases?: Record<string, unknown>;
      lockVersion?: number;
      createdMinutesAgo: number;
      leaseMinutes: number | null;
      response?: { code: number; body: string };
    },
  ) =>
    database.dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state, recovery_point,
         phase_results, lock_version, created_at, locked_until, response_code, response_body,
         finished_at)
       VALUES ('t1', $1, $2, $3, $4, $5, $6, clock_timestamp() - $7 * interval '1 minute',
         clock_timestamp() + $8 * interval '1 minute', $9, $10,
         CASE WHEN $3 = 'done' THEN clock_timestamp() - interval '30 minutes' END)`,
      [
        key,
        fp,
        fields.state ?? 'started',
        fields.recoveryPoint ?? 'start',
        JSON.stringify(fields.phases ?? {}),
        fields.lockVersion ?? 0,
        fields.createdMinutesAgo,
        fields.leaseMinutes,
        fields.response?.code ?? null,
        fields.response ? Buffer.from(fields.response.body) : null,
      ],
    );
  const row = async (key: string) =>
    (
      (await database.dataSource.query(
        `SELECT state, lock_version::int AS "lockVersion", claim_id AS "claimId",
           locked_until AS "lockedUntil", created_at AS "createdAt", finished_at AS "finishedAt",
           phase_results AS phases, locked_until > clock_timestamp() AS live
         FROM idempotency_keys WHERE tenant_id = 't1' AND key = $1`,
        [key],
      )) as {
        state: string;
        lockVersion: number;
        claimId: string;
        lockedUntil: Date | null;
        createdAt: Date;
        finishedAt: Date | null;
        phases: Record<string, unknown>;
        live: boolean | null;
      }[]
    )[0];

  beforeAll(async () => {
    database = await createMigratedDatabase('doctor_keys');
    store = new PostgresClaimStore(new IdempotencyDatabase(() => database.dataSource, 5000));
    await seed('stuck-1', {
      recoveryPoint: 'charge_created',
      phases: { charge_created: { id: 'ch_1' } },
      lockVersion: 1,
      createdMinutesAgo: 150,
      leaseMinutes: -90,
    });
    await seed('in-flight', { createdMinutesAgo: 90, leaseMinutes: 90 });
    // Given back on purpose (a 503 to retry): no lease, waiting for its client's retry. Not
    // stuck, however old (the purge takes it if no retry comes).
    await seed('given-back', { createdMinutesAgo: 180, leaseMinutes: null });
    await seed('done-1', {
      state: 'done',
      recoveryPoint: 'finished',
      createdMinutesAgo: 40,
      leaseMinutes: null,
      response: { code: 201, body: '{"id":"ch_1"}' },
    });
  });
  afterAll(() => database?.drop());

  it('doctor: a stuck key (started, lease long expired) is a warning, exit 0', async () => {
    const run = await runCli(['doctor', '--url', database.url]);
    expect(run.stdout).toBe(
      [
        SCHEMA_OK,
        MIGRATIONS_OK,
        SYNC_OK,
        STATEMENT_OK,
        LOCK_OK,
        poolOk(),
        PLAIN_OK,
        'warn  keys: 1 stuck: started, lease expired over 1 min ago, the oldest 1 h ago, no ' +
          'retry since (`keys list` shows them; a retry with the key takes it over and resumes)',
        '0 problems, 1 warning.',
        '',
      ].join('\n'),
    );
    expect(run.code).toBe(0);
  });

  it('list: the unfinished keys, stuck first, those given back last, never the finished', async () => {
    // Two runs that only read the keys: at once.
    const [run, first] = await Promise.all([
      runCli(['keys', 'list', '--url', database.url]),
      runCli(['keys', 'list', '--url', database.url, '--limit', '1']),
    ]);
    expect(run.stdout).toBe(
      [
        'STATUS      TENANT  KEY         PHASE           LOCK  AGE  LEASE',
        'stuck       t1      stuck-1     charge_created  1     2 h  expired 1 h ago',
        'in flight   t1      in-flight   start           0     1 h  ends in 1 h',
        'given back  t1      given-back  start           0     3 h  none',
        '3 unfinished: 1 in flight, 1 stuck, 1 given back (waiting for their retry).',
        '',
      ].join('\n'),
    );
    expect(run.code).toBe(0);
    expect(first.stdout).toMatch(
      /\n1 unfinished: 0 in flight, 1 stuck \(the first 1: --limit shows more\)\.\n$/,
    );
  });

  it('list --tenant: only the tenants that begin so (a queue’s jobs, the tasks)', async () => {
    const [t1, none] = await Promise.all([
      runCli(['keys', 'list', '--url', database.url, '--tenant', 't1']),
      runCli(['keys', 'list', '--url', database.url, '--tenant', 'bullmq:']),
    ]);
    expect(t1.stdout.split('\n').filter((line) => / t1 /.test(line))).toHaveLength(3);
    expect(none.stdout).not.toMatch(/ t1 /);
    expect([t1.code, none.code]).toEqual([0, 0]);
  });
  it('show: state, phases, lease, owner and timings, not the body unless asked', async () => {
    const [stuck, done] = await Promise.all([row('stuck-1'), row('done-1')]);
    // Four runs that only read the keys: at once.
    const [shown, withoutBody, withBody, missing] = await Promise.all([
      runCli(['keys', 'show', 't1', 'stuck-1', '--url', database.url]),
      runCli(['keys', 'show', 't1', 'done-1', '--url', database.url]),
      runCli(['keys', 'show', 't1', 'done-1', '--body', '--url', database.url]),
      runCli(['keys', 'show', 't1', 'nope', '--url', database.url]),
    ]);
    expect(shown.stdout).toBe(
      [
        'tenant:         t1',
        'key:            stuck-1',
        'status:         stuck',
        'recovery point: charge_created',
        'phases:         charge_created',
        `lease:          ${stuck.lockedUntil!.toISOString()} (expired 1 h ago)`,
        'lock version:   1',
        `claim id:       ${stuck.claimId}`,
        `created:        ${stuck.createdAt.toISOString()} (2 h ago)`,
        'finished:       no',
        '',
      ].join('\n'),
    );
    expect(shown.code).toBe(0);

    expect(withoutBody.stdout).toContain(
      `finished:       ${done.finishedAt!.toISOString()} (30 min ago)\n` +
        'response:       201, 13 bytes stored (--body prints them)\n',
    );
    expect(withoutBody.stdout).toMatch(/^status: {9}finished\n/m);
    expect(withoutBody.stdout).not.toContain('ch_1');
    expect(withBody.stdout).toMatch(/response: {7}201, 13 bytes stored\n\{"id":"ch_1"\}\n$/);

    expect(missing.stdout).toBe('No such key.\n');
    expect(missing.code).toBe(1);
  });

  it('show under globalKeys: "" names tenant 0, and a key under another tenant says where it is', async () => {
    // What an app with globalKeys: true stores: every key under tenant 0.
    await database.dataSource.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
       VALUES ('0', 'global-1', $1, clock_timestamp() + interval '1 hour')`,
      [fp],
    );
    const [global, elsewhere, release] = await Promise.all([
      runCli(['keys', 'show', '', 'global-1', '--url', database.url]),
      runCli(['keys', 'show', 't1', 'global-1', '--url', database.url]),
      runCli(['keys', 'release', 't1', 'global-1', '--yes', '--url', database.url]),
    ]);
    expect(global.stdout).toMatch(/^tenant: {9}0\nkey: {12}global-1\nstatus: {9}in flight\n/);
    expect(global.code).toBe(0);
    expect(elsewhere.stdout).toBe(
      'No such key under tenant t1; the key global-1 is kept under tenant 0 (an app with ' +
        'globalKeys: true keeps its keys under tenant 0, which "" names too).\n',
    );
    expect(elsewhere.code).toBe(1);
    expect(release.stdout).toBe(
      'Not released: no such key under tenant t1; the key global-1 is kept under tenant 0 (an ' +
        'app with globalKeys: true keeps its keys under tenant 0, which "" names too).\n',
    );
    expect(release.code).toBe(1);
    await database.dataSource.query(`DELETE FROM idempotency_keys WHERE key = 'global-1'`);
  });

  it('release: never a finished key', async () => {
    const before = await row('done-1');
    const run = await runCli(['keys', 'release', 't1', 'done-1', '--yes', '--url', database.url]);
    expect(run.stdout).toBe(
      'Not released: the key is finished (response 201): a finished key is never released.\n',
    );
    expect(run.code).toBe(1);
    expect(await row('done-1')).toEqual(before);
  });

  it('release: a key held by a dead worker is taken over by the next request at once', async () => {
    const scope = { tenantId: 't1', key: 'dead-worker' };
    const claimed = await store.claim(scope, fp, 600_000);
    expect(claimed.kind).toBe('claimed');
    // The worker is gone; its 10-minute lease answers every retry 409.
    const retry = await store.claim(scope, fp, 600_000);
    expect(retry.kind === 'existing' && decide(retry.existing, fp).kind).toBe('in-progress');

    const run = await runCli([
      'keys',
      'release',
      't1',
      'dead-worker',
      '--yes',
      '--url',
      database.url,
    ]);
    expect(run.stdout).toMatch(/^tenant: {9}t1\n/);
    expect(run.stdout).toMatch(
      /\nReleased t1 dead-worker \(lock version 0; its lease would have run another 9 min\): the next request with this key takes it over and resumes after "start"\.\n$/,
    );
    expect(run.code).toBe(0);

    const after = await store.claim(scope, fp, 600_000);
    if (after.kind !== 'existing') throw new Error('expected the existing row');
    // Released as the library releases (no lease at all), so the retry counts as resumed.
    expect(after.existing.state === 'started' && after.existing.released).toBe(true);
    const decision = decide(after.existing, fp);
    if (decision.kind !== 'take-over') throw new Error(`expected take-over, got ${decision.kind}`);
    const taken = await store.takeOver(scope, decision.fence, 600_000);
    expect(taken?.lockVersion).toBe('1');
    if (claimed.kind === 'claimed') expect(taken?.claimId).toBe(claimed.claim.claimId);
  });

  it('release: a key taken over while the operator decided is not released', async () => {
    const scope = { tenantId: 't1', key: 'moved' };
    const claimed = await store.claim(scope, fp, 1_000);
    expect(claimed.kind).toBe('claimed');

    const { child, done } = startCli(['keys', 'release', 't1', 'moved', '--url', database.url]);
    await printed(child, 'Release this key? [y/N] ');
    // Meanwhile the lease ends and a retry takes the key over, as the library does.
    let taken;
    for (let attempt = 0; attempt < 50 && !taken; attempt++) {
      await sleep(200);
      const seen = await store.claim(scope, fp, 600_000);
      if (seen.kind !== 'existing') throw new Error('expected the existing row');
      const decision = decide(seen.existing, fp);
      if (decision.kind === 'take-over')
        taken = await store.takeOver(scope, decision.fence, 600_000);
    }
    expect(taken?.lockVersion).toBe('1');
    child.stdin!.end('y\n');
    const run = await done;
    expect(run.stdout).toMatch(
      /\nNot released: the key moved since it was read \(it is in flight now, lock version 1\)\.\n$/,
    );
    expect(run.code).toBe(1);
    // The new owner's lease is intact.
    const after = await row('moved');
    expect(after.lockVersion).toBe(1);
    expect(after.live).toBe(true);
  });

  it('release: answering no releases nothing', async () => {
    const before = await row('in-flight');
    const { child, done } = startCli(['keys', 'release', 't1', 'in-flight', '--url', database.url]);
    await printed(child, 'Release this key? [y/N] ');
    child.stdin!.end('n\n');
    const run = await done;
    expect(run.stdout).toMatch(/\nNot released\.\n$/);
    expect(run.code).toBe(1);
    expect(await row('in-flight')).toEqual(before);
  });
});
