import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 22: on a database with `idle_in_transaction_session_timeout` (a common
 * production safeguard; docs/reference/problems.md names it), a `oneCommit` route whose
 * handler does a moment of work of its own before its first statement (rendering, hashing, an
 * in-process queue: no call to another system) answers 503 for every request and every retry
 * with the same key: it can never succeed. Without `oneCommit` the same handler runs (its
 * transaction opens at its first statement).
 *
 * What the app does (Express, pool): the database has `idle_in_transaction_session_timeout =
 * 400ms`; `POST /reports` works 800 ms in process (no database, no other system), then
 * inserts its row.
 *
 * What happens: the claim opens the request's transaction before the handler starts
 * (claim-with-work.ts:31, request-transaction.ts `beginWithClaim`), so the handler's own work
 * runs with the transaction idle: PostgreSQL ends the session after 400 ms (25P03, FATAL),
 * the claim with it; the handler's first statement meets a dead connection, the request is
 * answered 503 "retry later", and the retry does the same. Nothing bounds or warns about it
 * (the call-out warning covers HTTP calls only).
 *
 * What should happen: idempotency-options.interface.ts (`oneCommit`) offers "one commit per
 * new key instead of two" for "a route whose work is local"; a handler whose work is local
 * and that works without `oneCommit` should not fail for ever with it (the lazy transaction
 * the library promises elsewhere: "opened by its first statement, not before, so that a
 * handler that waits on something else ... holds no connection while it waits",
 * request-transaction.ts:57-59). Either the transaction's idle time is the library's to keep
 * alive/bound, or start-up/docs must say that `oneCommit` needs a handler that never idles
 * longer than the server's `idle_in_transaction_session_timeout`.
 *
 * Why it matters: a module-wide `oneCommit: true` turns routes that work into routes that
 * 503 on every try, where the 503 tells clients to retry (more load, never success).
 *
 * Severity: medium (availability, deterministic for the routes hit; no double effect).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Controller()
class ReportsController {
  private async report(text: string) {
    await sleep(800); // the handler's own work, in process
    await pool.query('INSERT INTO notes (text) VALUES ($1)', [text]);
    return { text };
  }

  @Post('reports-one-commit')
  @Idempotent({ oneCommit: true })
  oneCommit(@Body() body: { text: string }) {
    return this.report(body.text);
  }

  @Post('reports')
  @Idempotent()
  twoCommits(@Body() body: { text: string }) {
    return this.report(body.text);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReportsController],
})
class ReportsModule {}

describe('adversary 22: oneCommit under idle_in_transaction_session_timeout', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv22_idle_timeout', {
      module: ReportsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL)');
        await admin.query(
          `DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET idle_in_transaction_session_timeout = %L', current_database(), '400ms'); END $$`,
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = (path: string, key: string, body: object) =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const rows = async (text: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM notes WHERE text = $1', [text])).rows[0]
        .count,
    );

  it('control: without oneCommit, the handler runs', async () => {
    const answer = await post('/reports', 'adv22-idle-control', { text: 'control' });
    expect(answer.status).toBe(201);
    expect(await rows('control')).toBe(1);
  });

  it('oneCommit: the handler runs (fails: 503, and the retry 503)', async () => {
    const answer = await post('/reports-one-commit', 'adv22-idle-one', { text: 'one' });
    const retry = await post('/reports-one-commit', 'adv22-idle-one', { text: 'one' });
    // Received: [503, 503], no row.
    expect({ statuses: [answer.status, retry.status], rows: await rows('one') }).toEqual({
      statuses: [201, 201],
      rows: 1,
    });
  });
});
