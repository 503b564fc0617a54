import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 24: a `oneCommit` route whose handler builds its answer inside a read-only
 * transaction (Drizzle's `db.transaction(fn, { accessMode: 'read only' })`, the way
 * docs/guides/drizzle.md and round 12's file make a report's reads consistent) and works in
 * process there for longer than the lease (renders the report) answers 503 on every try,
 * deterministically. Without `oneCommit` the same handler answers 201.
 *
 * What the app does (Express, node-postgres pool given to the library, Drizzle on it): the
 * route `@Idempotent({ oneCommit: true, leaseMs: 1500 })` inserts its order row, then, in a
 * read-only Drizzle transaction, reads the order's lines and renders them (2.5 s of work in
 * the process, no other system called), and answers the report.
 *
 * What happens: the claim's transaction sets `idle_in_transaction_session_timeout` to the
 * lease (claim-at-begin.ts:34 `idleBound`, sent by request-transaction.ts `beginWithClaim`),
 * trusting the heartbeat to renew inside it every third of the lease (`renewsInside`). But
 * inside a read-only nested transaction the heartbeat skips its tick
 * (lease-renewals.ts:120-122: `if (holder!.readOnlyNow) return Promise.resolve(true)`, whose
 * comment reasons only about takeovers, not about the idle bound), so nothing is sent while
 * the handler renders: PostgreSQL ends the session after 1.5 s idle (25P03, FATAL), the
 * claim and the insert with it, and the request is answered 503; every retry does the same.
 *
 * What is expected: the idle bound is for a worker gone without a word (docs/guides/
 * transactions.md "A crash leaves nothing": "a live worker's heartbeat renews inside it every
 * third of that"); a live worker in a read-only part of its code is still live. 201 once, the
 * order inserted once, as without `oneCommit`.
 *
 * Severity: medium (a route that can never succeed: 503 "retry" for ever; no double effect).
 */
let db: NodePgDatabase;
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

type Order = { ref: string };

async function placeAndReport({ ref }: Order) {
  await db.execute(sql`INSERT INTO orders (ref) VALUES (${ref})`);
  return db.transaction(
    async (tx) => {
      const { rows } = await tx.execute<{ n: number }>(
        sql`SELECT count(*)::int AS n FROM orders WHERE ref = ${ref}`,
      );
      await sleep(2500); // rendering the report, in process
      return { ref, orders: rows[0].n };
    },
    { accessMode: 'read only' },
  );
}

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent({ leaseMs: 1500 })
  twoCommits(@Body() body: Order) {
    return placeAndReport(body);
  }

  @Post('orders-one-commit')
  @Idempotent({ leaseMs: 1500, oneCommit: true })
  oneCommit(@Body() body: Order) {
    return placeAndReport(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 24: oneCommit, a read-only report longer than the lease', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv24_read_only_idle', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = (path: string, key: string, body: object) =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const count = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM orders WHERE ref = $1', [ref])).rows[0]
        .count,
    );

  it('control: without oneCommit, 201 once, the replay byte for byte', async () => {
    const first = await post('/orders', 'adv24-ro-control', { ref: 'control' });
    const retry = await post('/orders', 'adv24-ro-control', { ref: 'control' });
    expect([first.status, retry.status]).toEqual([201, 201]);
    expect(retry.text).toBe(first.text);
    expect(first.body).toEqual({ ref: 'control', orders: 1 });
    expect(await count('control')).toBe(1);
  }, 30_000);

  it('oneCommit: 201 once, the replay byte for byte (fails: 503, and the retry 503)', async () => {
    const first = await post('/orders-one-commit', 'adv24-ro-one', { ref: 'one' });
    const retry = await post('/orders-one-commit', 'adv24-ro-one', { ref: 'one' });
    if (process.env.ADV_DEBUG) console.log(first.status, first.text, retry.status, retry.text);
    // Received: statuses [503, 503], no order.
    expect({ statuses: [first.status, retry.status], orders: await count('one') }).toEqual({
      statuses: [201, 201],
      orders: 1,
    });
  }, 30_000);
});
