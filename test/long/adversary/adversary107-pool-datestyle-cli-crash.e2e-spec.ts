/**
 * Adversary 107 (pool): a database (or role) whose `DateStyle` is not ISO makes the command
 * crash on every key it shows or lists: `keys show`, `keys list` print a TypeError instead of
 * the key.
 *
 * User code (an operator's, ordinary PostgreSQL):
 *   ALTER DATABASE app SET DateStyle = 'German';      -- or 'SQL, DMY', 'Postgres, MDY'
 *   npx nestjs-idempotency-pg keys show t1 order-1 --url postgres://…/app
 *
 * Code path: lib/cli/main.ts gives its client `types: LIBRARY_TYPES`; lib/connection/
 * library-types.ts `asDate` reads only the ISO style (`TIMESTAMP` regex) and answers "any other
 * text as it is": `created_at`, `locked_until`, `clock_timestamp()` come back as strings like
 * `07.12.2026 07:27:01.000646 UTC`; lib/cli/key-views.ts then calls `row.lockedUntil.getTime()`
 * on a string. The library's sessions never pin `DateStyle` (no `SET DateStyle`, no
 * `options=-c DateStyle=ISO`), and nothing at start-up says the setting is not supported.
 * The same text reaches the partitioned expiry (`SELECT now()`, `expirySteps` →
 * `now.getTime()`) and the doctor's partition bounds.
 *
 * Docs quote: lib/connection/library-types.ts: "neither a pool's `types` nor
 * `pg.types.setTypeParser` reaches what the library reads"; the brief's promise: a
 * misconfiguration fails at start-up with what to do; docs/operations (keys show): "one key:
 * state, phases, lease, owner, timings".
 *
 * Severity: medium (the operator's tool is useless on such a database; a stuck key cannot be
 * looked at; the same reads in the partitioned expiry make it throw on each run, so partitions
 * past the retention are never dropped).
 *
 * Fails now: `keys show` on the database with DateStyle German prints on stderr
 * `postgres://…: row.lockedUntil.getTime is not a function` (the TypeError's message, said as if
 * the database were at fault) and shows nothing of the key.
 *
 * Controls: the same key on a database with the default DateStyle is shown (`status: in flight`).
 *
 * Suggested fix: pin the library's sessions to ISO (`SET DateStyle = ISO` in the CLI's
 * connect, `options: '-c DateStyle=ISO'`), or have the library's SQL return its times as epoch
 * ms (`extract(epoch …) * 1000`) / `to_char(… , 'YYYY-MM-DD"T"HH24:MI:SS.USOF')`, never as a
 * timestamptz read by a style-dependent parser.
 *
 * Fixed (session of 2026-12-07): the command reads every time (the clock, `created_at`,
 * `finished_at`, `locked_until`, the partitions' bounds) as milliseconds since 1970 in an int8
 * (lib/connection/epoch-ms.ts `epochMsOf`, read back by `dateOfEpochMs`), text no `DateStyle`
 * changes; the doctor reads the bounds the same way, so what it reports holds.
 */
import { runCli } from '../../support/cli-process.js';
import { createMigratedDatabase, type MigratedDatabase } from '../../support/migrated-database.js';

const fp = Buffer.alloc(32, 7);

async function withKey(database: MigratedDatabase): Promise<void> {
  await database.dataSource.query(
    `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
     VALUES ('t1', 'order-1', $1, clock_timestamp() + interval '1 hour')`,
    [fp],
  );
}

describe('adversary 107 pool: a database DateStyle other than ISO crashes the command', () => {
  let plain: MigratedDatabase;
  let german: MigratedDatabase;

  beforeAll(async () => {
    plain = await createMigratedDatabase('adv107_pool_datestyle_plain');
    german = await createMigratedDatabase('adv107_pool_datestyle_german');
    await withKey(plain);
    await withKey(german);
    const name = new URL(german.url).pathname.slice(1);
    await german.dataSource.query(`ALTER DATABASE "${name}" SET DateStyle = 'German'`);
  }, 120_000);

  afterAll(async () => {
    await plain?.drop();
    await german?.drop();
  });

  it('control: keys show on a database with the default DateStyle shows the key', async () => {
    const run = await runCli(['keys', 'show', 't1', 'order-1', '--url', plain.url]);
    expect(run.stdout).toMatch(/^tenant: {9}t1\nkey: {12}order-1\nstatus: {9}in flight\n/);
    expect(run.code).toBe(0);
  }, 60_000);

  it('keys show on a database with DateStyle German shows the key', async () => {
    const run = await runCli(['keys', 'show', 't1', 'order-1', '--url', german.url]);
    expect(run.stderr).toBe('');
    expect(run.stdout).toMatch(/^tenant: {9}t1\nkey: {12}order-1\nstatus: {9}in flight\n/);
    expect(run.code).toBe(0);
  }, 60_000);
});
