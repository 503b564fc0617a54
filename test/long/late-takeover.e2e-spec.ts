import { Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  Idempotent,
  PartitionIdempotencyKeys1764461600000,
} from '../../lib/index.js';
import { bootstrapTestApp } from '../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { SlowAnswerProxy } from '../support/slow-answer-proxy.js';

/**
 * Found by an adversarial review (issue 27): a takeover whose answer comes after its
 * statement's deadline. As for a claim (`lateClaim`/`giveBackLate`), the statement committed:
 * the key is taken over (its `lock_version` moved on, a fresh lease) but its request was
 * answered 503 and runs nothing. The claim's late row was given back; the takeover's was
 * dropped, so the key was held to its lease by nobody and the client's retry told 409. On the
 * plain keys table and the partitioned one (whose claim is `idempotency_claim()`).
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

const DEADLINE_MS = 400;
const TAKE_OVER = /idempotency_take_over|lock_version = lock_version \+ 1/;

const LAYOUTS = [
  {
    layout: 'plain',
    migrations: IDEMPOTENCY_MIGRATIONS,
    partitionedExpiry: false,
    claim: /idempotency_claim_v|INSERT INTO idempotency_keys/,
  },
  {
    layout: 'partitioned',
    migrations: [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000],
    partitionedExpiry: true,
    claim: /idempotency_claim/,
  },
] as const;

describe.each(LAYOUTS)('a takeover answered after its deadline ($layout keys table)', (setup) => {
  const CLAIM = setup.claim;
  let database: TestDatabase;
  let proxy: SlowAnswerProxy;
  let app: INestApplication;
  let db: Client;

  beforeAll(async () => {
    database = await createTestDatabase(`late_takeover_${setup.layout}`);
    const migrations = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: [...setup.migrations],
    });
    await migrations.initialize();
    await migrations.runMigrations();
    await migrations.destroy();
    const direct = new URL(database.url);
    // Its answer comes 700 ms late: past the 400 ms deadline, within the 1 s the caller
    // waits for its cancel to be acted on (CANCEL_WAIT_MS), so `late` would get it.
    proxy = new SlowAnswerProxy(Number(direct.port || 5432), 700, TAKE_OVER);
    await proxy.start();
    const url = new URL(database.url);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    @Module({
      imports: [
        TypeOrmModule.forRoot({ type: 'postgres', url: url.toString(), logging: false }),
        IdempotencyModule.forRoot({
          globalKeys: true,
          databaseTimeoutMs: DEADLINE_MS,
          partitionedExpiry: setup.partitionedExpiry,
        }),
        PaymentsModule,
      ],
    })
    class AppModule {}
    app = await bootstrapTestApp(AppModule, 'express');
    db = new Client({ connectionString: database.url });
    await db.connect();
  });

  afterAll(async () => {
    await app?.close();
    await db?.end();
    await proxy?.stop();
    await database?.drop();
  });

  const pay = (key: string) =>
    request(app.getHttpServer()).post('/payments').set('Idempotency-Key', key).send({ amount: 1 });

  // What must hold: the takeover that landed after its 503 is given back (its lease ended,
  // as RELEASE does without forgetting: lock_version and claim_id kept), so the client's
  // retry takes the key over at once and runs the handler: 201. Before the fix, the retry is answered
  // 409 key_in_progress for the whole lease (5 s by default), though nothing runs.
  it('gives a late takeover back, so the retry after its 503 runs the handler', async () => {
    expect((await pay('first')).status).toBe(201);
    // A worker that crashed while holding 'crashed': same request, its lease ran out.
    await db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
       SELECT tenant_id, 'crashed', fingerprint, now() - interval '1 second'
       FROM idempotency_keys WHERE key = 'first'`,
    );
    executions = 0;
    proxy.trigger = TAKE_OVER;
    const takeover = await pay('crashed');
    expect(takeover.status).toBe(503);
    const { rows } = await db.query(
      "SELECT lock_version FROM idempotency_keys WHERE key = 'crashed'",
    );
    // The takeover committed (the row's lock_version moved on) though it was answered 503.
    expect(rows[0].lock_version).toBe('1');
    proxy.trigger = /(?!)/;
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const retry = await pay('crashed');
    expect({ status: retry.status, code: retry.body.code, executions }).toEqual({
      status: 201,
      code: undefined,
      executions: 1,
    });
  });

  // Held, the control: the same late answer for a claim is given back (issue 27's fix).
  it('gives a late claim back, so the retry after its 503 runs the handler', async () => {
    executions = 0;
    proxy.trigger = CLAIM;
    expect((await pay('late-claim')).status).toBe(503);
    proxy.trigger = /(?!)/;
    // The retry a moment later (the process's claims wait behind the late one's statement).
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const retry = await pay('late-claim');
    expect({ status: retry.status, executions }).toEqual({ status: 201, executions: 1 });
  });

  // The client retries at once after its 503, as a client told "nothing was executed" may.
  // What must hold: the key given back before the retry's claim is sent (the batcher holds
  // the key's next claim until the late row's give-back has landed), so the retry runs: 201.
  // Before the fix, the retry's claim went out beside the give-back, found the late row still
  // there and was told 409 key_in_progress, though nothing ran (on both tables: checked by
  // skipping the wait, 409 on each).
  it('gives a late claim back before the retry that follows its 503 at once', async () => {
    executions = 0;
    proxy.trigger = CLAIM;
    // The give-back reaches the server a moment after the retry's claim (it waits for a
    // connection of the pool, say): held on its way by the proxy.
    proxy.held = /idempotency_release_v|WITH deleted AS/;
    const first = await pay('late-claim-now');
    proxy.trigger = /(?!)/;
    expect(first.status).toBe(503);
    const retry = await pay('late-claim-now');
    proxy.held = /(?!)/;
    expect({ status: retry.status, executions }).toEqual({ status: 201, executions: 1 });
  });
});
