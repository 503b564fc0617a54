import { Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { SlowAnswerProxy } from '../../support/slow-answer-proxy.js';

/**
 * Adversary 39c: on a database whose default isolation is above READ COMMITTED, a claim whose
 * COMMIT is answered after the statement's deadline is never given back: the client is told
 * 503, nothing runs, and its retry is answered 409 key_in_progress until the lease runs out.
 *
 * App: TypeORM (or any pool), `ALTER DATABASE app SET default_transaction_isolation =
 * 'serializable'` (docs/guides/transactions.md: a supported set-up), one `@Idempotent()`
 * route, `databaseTimeoutMs: 400`. The network (or the server's send buffer) is slow for one
 * answer: the one that says the claim committed.
 *
 * What happens: above READ COMMITTED the library wraps its own statement in `BEGIN ISOLATION
 * LEVEL READ COMMITTED; <claim>; COMMIT` (lib/transaction/idempotency-database.ts:306-317).
 * The claim's `late` callback (lib/claim/postgres-claim.store.ts:351 and :183, giveBackLate) is
 * dropped there (`late: named ? undefined : late`, idempotency-database.ts:311), and the COMMIT
 * is sent `{ commits: true }` with no `late` of its own (idempotency-database.ts:316): when the
 * COMMIT's answer comes after the deadline, the claim HAS committed, the caller is told 503
 * ("nothing was executed"), and nobody gives the key back. The key is held by nobody for the
 * whole lease (5 s by default; an app with a 60 s lease: a minute of 409s for a request that
 * never ran). The takeover of a crashed worker's key is the same: its `late` give-back
 * (postgres-claim.store.ts:215-218) is dropped alike; its retry is told 409 for the new lease.
 *
 * Expected (and the control, same app with the database at READ COMMITTED, same slow answer
 * to the statement that commits the claim, there the claim itself in autocommit): the late
 * claim is given back (as test/long/late-claim-pgbouncer.e2e-spec.ts requires), and the retry a
 * moment after the 503 runs the handler: 201 (the takeover: as test/long/late-takeover.e2e-spec.ts).
 *
 * Severity: medium (a wrong, retryable answer: 409s for a lease, for a request that never ran;
 * the promise "given back at once, not left held until its lease runs out" of
 * postgres-claim.store.ts:178-181, broken on this set-up).
 */

let executions = 0;

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  create() {
    executions++;
    return { ok: true };
  }
}

@Module({ controllers: [PaymentsController] })
class PaymentsModule {}

const CLAIM = /idempotency_claim_v|INSERT INTO idempotency_keys/;
// The simple-query message COMMIT alone (not BEGIN ISOLATION LEVEL READ COMMITTED).
// eslint-disable-next-line no-control-regex -- the wire bytes of that message, length included
const COMMIT = /Q\u0000\u0000\u0000\u000bCOMMIT\u0000/;
const NEVER = /(?!)/;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const TAKE_OVER = /idempotency_take_over|lock_version = lock_version \+ 1/;

/** The first COMMIT sent after the takeover statement (its own transaction's). */
function commitAfterTakeOver(): RegExp {
  let tookOver = false;
  return {
    test(text: string) {
      if (TAKE_OVER.test(text)) tookOver = true;
      return tookOver && COMMIT.test(text);
    },
  } as RegExp;
}

const CASES = [
  // Control: the claim runs in autocommit; its own answer is the commit's.
  { level: 'read committed', commitOfClaim: CLAIM, commitOfTakeOver: () => TAKE_OVER },
  // The failing case: the claim runs in BEGIN READ COMMITTED ... COMMIT; the COMMIT's answer.
  { level: 'serializable', commitOfClaim: COMMIT, commitOfTakeOver: commitAfterTakeOver },
  { level: 'repeatable read', commitOfClaim: COMMIT, commitOfTakeOver: commitAfterTakeOver },
] as const;

describe.each(CASES)('a claim whose commit is answered late (default $level)', (setup) => {
  let database: TestDatabase;
  let proxy: SlowAnswerProxy;
  let app: INestApplication;
  let db: Client;

  beforeAll(async () => {
    database = await createTestDatabase('adv39c_late_commit');
    const setter = new Client({ connectionString: database.url });
    await setter.connect();
    await setter.query(
      `ALTER DATABASE ${database.name} SET default_transaction_isolation = '${setup.level}'`,
    );
    await setter.end();
    db = new Client({ connectionString: database.url });
    await db.connect();
    const migrations = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: IDEMPOTENCY_MIGRATIONS,
    });
    await migrations.initialize();
    await migrations.runMigrations();
    await migrations.destroy();
    const direct = new URL(database.url);
    proxy = new SlowAnswerProxy(Number(direct.port || 5432), 700, NEVER);
    await proxy.start();
    const url = new URL(database.url);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: url.toString(), logging: false }),
        IdempotencyModule.forRoot({ globalKeys: true, databaseTimeoutMs: 400 }),
        PaymentsModule,
      ],
    })
    class AppModule {}
    app = await bootstrapTestApp(AppModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await db?.end();
    await proxy?.stop();
    await database?.drop();
  });

  const pay = (key: string) =>
    request(app.getHttpServer()).post('/payments').set('Idempotency-Key', key).send({ amount: 1 });

  it('gives the late claim back: the retry a moment after its 503 runs the handler', async () => {
    // Warm: the library has learnt the server's level, prepared its statements.
    expect((await pay('warm')).status).toBe(201);
    const { rows: level } = await db.query(`SHOW default_transaction_isolation`);
    expect(level[0].default_transaction_isolation).toBe(setup.level);
    executions = 0;
    proxy.trigger = setup.commitOfClaim;
    expect((await pay('late-claim')).status).toBe(503);
    proxy.trigger = NEVER;
    await sleep(1500);
    const retry = await pay('late-claim');
    expect({ status: retry.status, code: retry.body.code, executions }).toEqual({
      status: 201,
      code: undefined,
      executions: 1,
    });
  });

  // The same for a takeover of a key whose worker crashed (its lease ran out): the takeover's
  // late row is given back at READ COMMITTED (test/long/late-takeover.e2e-spec.ts), not above it.
  it('gives a late takeover back: the retry a moment after its 503 runs', async () => {
    expect((await pay('first')).status).toBe(201);
    await db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
       SELECT tenant_id, 'crashed', fingerprint, now() - interval '1 second'
       FROM idempotency_keys WHERE key = 'first'`,
    );
    executions = 0;
    proxy.trigger = setup.commitOfTakeOver();
    expect((await pay('crashed')).status).toBe(503);
    proxy.trigger = NEVER;
    const { rows } = await db.query(
      "SELECT lock_version FROM idempotency_keys WHERE key = 'crashed'",
    );
    // The takeover committed (the row's lock_version moved on) though it was answered 503.
    expect(rows[0].lock_version).toBe('1');
    await sleep(1500);
    const retry = await pay('crashed');
    expect({ status: retry.status, code: retry.body.code, executions }).toEqual({
      status: 201,
      code: undefined,
      executions: 1,
    });
  });
});
