import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Notification, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, RetryLaterError } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 8: transactions.md: a plain read that runs apart may use no "operator other
 * than PostgreSQL's comparisons, arithmetic, text, JSON and array ones" (round 4: an operator
 * of the app's, `7 ### 1`, ran apart). `isPlainRead` checks the operator of each `A_Expr`; but
 * an operator applied to a subquery (`x ~~~ ANY (SELECT …)`, `x ~~~ ALL (…)`, `(…) ~~~ (SELECT
 * …)`) is a `SubLink`, whose `operName` is never read: the app's operator runs apart, in the
 * read-only transaction of its round trip, which lets `pg_notify` through
 * (adversary6-read-only-escapes).
 *
 * What a user does: before its write, the handler filters with its own operator against a
 * subquery (a "fuzzy match" operator whose function announces each hit to the app's
 * listeners); the first attempt fails for a passing reason (`RetryLaterError`: 503, "rolled
 * back, nothing stored", the retry "runs it once").
 * What happens: the read ran apart, its notification was delivered, and the retry sent it
 * again: two for one 201.
 * What should happen: one, as with the same operator against a value (`tag ~~~ 'x'`, the
 * control), which opens the request's transaction and rolls back with the first attempt.
 */
let pool: Pool;
const failedOnce = new Set<string>();

@Controller()
class ReadController {
  @Post('read-then-write')
  @Idempotent()
  async readThenWrite(@Body() body: { slot: string; read: string }) {
    await pool.query(body.read);
    await pool.query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
    if (!failedOnce.has(body.slot)) {
      failedOnce.add(body.slot);
      throw new RetryLaterError('the warehouse is busy', 1);
    }
    return { slot: body.slot };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReadController],
})
class ReadModule {}

describe('adversary 8: the app operator of a SubLink (x op ANY (SELECT …)) runs apart', () => {
  let fixture: PoolApp;
  let listener: Client;
  let app: INestApplication;
  const notified: string[] = [];

  beforeAll(async () => {
    fixture = await startPoolApp('adv8_sublink_operator', {
      module: ReadModule,
      max: 3,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
        await owner.query(
          "CREATE TABLE tags (id int PRIMARY KEY, tag text NOT NULL); INSERT INTO tags VALUES (1, 'x')",
        );
        await owner.query(`CREATE FUNCTION fuzzy_hit(a text, b text) RETURNS boolean
          LANGUAGE plpgsql AS $$
          BEGIN
            IF lower(a) = lower(b) THEN PERFORM pg_notify('app_events', 'hit ' || a); END IF;
            RETURN lower(a) = lower(b);
          END $$`);
        await owner.query(
          'CREATE OPERATOR ~~~ (LEFTARG = text, RIGHTARG = text, FUNCTION = fuzzy_hit)',
        );
      },
    });
    ({ app } = fixture);
    listener = new Client({ connectionString: fixture.database.url });
    await listener.connect();
    listener.on('notification', (message: Notification) => notified.push(message.payload ?? ''));
    await listener.query('LISTEN app_events');
  });

  afterAll(async () => {
    await listener?.end();
    await fixture?.close();
  });

  const post = (slot: string, read: string) =>
    request(app.getHttpServer()).post('/read-then-write').set('Idempotency-Key', slot).send({
      slot,
      read,
    });
  const settle = () => new Promise((resolve) => setTimeout(resolve, 300));

  it.each([
    ["tag ~~~ 'X' (the control)", 'value', "SELECT id FROM tags WHERE tag ~~~ 'X'"],
    ['tag ~~~ ANY (SELECT …)', 'any', "SELECT id FROM tags WHERE tag ~~~ ANY (SELECT 'X')"],
  ])('a notification sent by %s: once for one 201', async (_name, slot, read) => {
    notified.length = 0;
    const first = await post(slot, read);
    const retry = await post(slot, read);
    await settle();
    // Observed (ANY subquery): 2 notifications; against a value: 1.
    expect({ first: first.status, retry: retry.status, notified: notified.length }).toEqual({
      first: 503,
      retry: 201,
      notified: 1,
    });
  });
});
