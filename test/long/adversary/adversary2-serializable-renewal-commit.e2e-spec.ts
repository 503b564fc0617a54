import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 2 (issue 27), on fix 1 (claims at a SERIALIZABLE database default): the
 * claim is run again after a serialization failure, but the library's other statements in
 * autocommit run at that default too. A handler that sends no statement of its own (it calls
 * another service: an e-mail sent, counted here) has its answer stored by the fenced UPDATE
 * alone, in autocommit (RequestTransaction.commitNow, `!this.opening`). The heartbeat's
 * stop only clears its timer (run-owned.ts `settle`); a renewal on its way is not waited for.
 * When that renewal commits while the fenced UPDATE waits on its row lock, SERIALIZABLE
 * refuses the UPDATE (40001). Here the renewal is slowed by a row lock another session holds
 * for a moment (as a slow network or a busy row would). Observed: 503, the retry runs the
 * handler again: two e-mails for one key. Expected: one run, 201, the retry replays it.
 */
const LEASE_MS = 600;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let pool: Pool;
let sent = 0;

@Controller()
class MailController {
  @Post('mail')
  @Idempotent({ leaseMs: LEASE_MS })
  async mail(@Body() body: { to: string }) {
    sent++;
    await sleep(500);
    return { to: body.to, sent: true };
  }

  /** The control: a lease long enough that no renewal is on its way. */
  @Post('mail-long')
  @Idempotent({ leaseMs: 30_000 })
  async mailLong(@Body() body: { to: string }) {
    return this.mail(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [MailController],
})
class MailModule {}

describe('adversary 2: the answer stored alone at a SERIALIZABLE default, a renewal on its way', () => {
  let database: TestDatabase;
  let admin: Client;
  let locker: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv2_serializable_commit');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query(
      `ALTER DATABASE ${database.name} SET default_transaction_isolation = 'serializable'`,
    );
    locker = new Client({ connectionString: database.url });
    await locker.connect();
    pool = createTestPool({ connectionString: database.url, max: 4 });
    app = await bootstrapTestApp(MailModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await endTestPool(pool);
    await locker?.end();
    await admin?.end();
    await database?.drop();
  });

  /** Sends `key` to `path` while another session holds its row's lock for 600 ms. */
  async function underLock(path: string, key: string) {
    sent = 0;
    const send = () =>
      request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send({ to: 'a' });
    const first = send().then((answer) => answer);
    // Once the claim's row is there, another session holds its lock for 600 ms: the renewal
    // at ~200 ms waits on it, and so does the answer's UPDATE at ~500 ms.
    for (let i = 0; i < 100; i++) {
      const { rowCount } = await admin.query('SELECT 1 FROM idempotency_keys WHERE key = $1', [
        key,
      ]);
      if (rowCount) break;
      await sleep(5);
    }
    await locker.query('BEGIN ISOLATION LEVEL READ COMMITTED');
    await locker.query('SELECT 1 FROM idempotency_keys WHERE key = $1 FOR UPDATE', [key]);
    await sleep(600);
    await locker.query('COMMIT');
    const answer = await first;
    const retry = await send();
    return {
      status: answer.status,
      body: answer.body as unknown,
      replayed: retry.text === answer.text,
      sent,
    };
  }

  it('runs the handler once: 201, the retry replays it', async () => {
    const once = { status: 201, body: { to: 'a', sent: true }, replayed: true, sent: 1 };
    // The control: the same lock, no renewal on its way.
    expect(await underLock('/mail-long', 'mail-long-1')).toEqual(once);
    expect(await underLock('/mail', 'mail-1')).toEqual(once);
  });
});
