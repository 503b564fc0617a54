import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 21: on a `oneCommit` route at SERIALIZABLE, concurrent requests with
 * different keys abort each other (40001) through the library's own reads of
 * `idempotency_keys`, and are answered 503: the same load without oneCommit all succeeds.
 *
 * What the app does (Express, pool): `POST /orders` is `@Idempotent({ oneCommit: true,
 * isolationLevel: 'SERIALIZABLE' })`; its handler only INSERTs a row of its own (no read) and
 * takes 150 ms. Ten clients each send a new order with a key of their own, at once.
 *
 * What happens: claim-with-work.ts:30 sets the route's level before the claim, so the claim
 * (CLAIM, postgres-statements.ts:33-52: `NOT EXISTS (SELECT ... idempotency_keys ...)`
 * and a read of the key's row) is the first statement of a SERIALIZABLE transaction
 * (request-transaction.ts `beginWithClaim`), and the stored answer's fenced UPDATE
 * (COMPLETE, :121-124) runs in it too. Every request's transaction thus reads
 * `idempotency_keys` and writes a row of it: SSI sees rw-dependencies among requests of
 * unrelated keys (PostgreSQL's log: "could not serialize access due to read/write
 * dependencies among transactions", "Canceled on identification as a pivot, during conflict
 * out checking" on the fenced UPDATE, "... conflict in from prepared pivot" on COMMIT). Seen:
 * 1 to 2 of the ten answered 503 `database_transient` on every run. The handler's effects are
 * rolled back (no double effect), but a client without a retry loses the order.
 *
 * What should happen: the oneCommit doc comment (idempotency-options.interface.ts) promises
 * "one commit per new key instead of two", not new failures; `isolationLevel`'s comment: the
 * level is the handler's ("its reads then run in it"). The handler's own work conflicts with
 * nothing. Control: the same route without oneCommit (the claim committed apart, the
 * handler's SERIALIZABLE transaction touching only the key's row by its key): ten of ten 201.
 *
 * Why it matters: SERIALIZABLE is the level chosen by exactly the routes that care most
 * (money, stock); with oneCommit each request's bookkeeping makes it a conflict partner of
 * every other request in flight, so the 503 rate grows with concurrency (more so while the
 * table is small, or keys share btree pages). Severity: medium (availability; nothing done
 * twice, the retry runs it again).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function moduleFor(oneCommit: boolean) {
  @Controller()
  class OrdersController {
    @Post('orders')
    @Idempotent({ oneCommit, isolationLevel: 'SERIALIZABLE' })
    async create(@Body() body: { text: string }) {
      await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
      await sleep(150);
      return { text: body.text };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        useFactory: () => ({ globalKeys: true, pool }),
      }),
    ],
    controllers: [OrdersController],
  })
  class OrdersModule {}
  return OrdersModule;
}

async function scenario(oneCommit: boolean) {
  const fixture: PoolApp = await startPoolApp(`adv21_ssi_${oneCommit ? 'one' : 'two'}`, {
    module: moduleFor(oneCommit),
    max: 12,
    usePool: (started) => (pool = started),
    setup: async (admin) => {
      await admin.query('CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL)');
    },
  });
  try {
    const server = fixture.app.getHttpServer();
    const answers = await Promise.all(
      Array.from({ length: 10 }, (_, i) =>
        request(server)
          .post('/orders')
          .set('Idempotency-Key', `order-${i}`)
          .send({ text: `order-${i}` })
          .then((r) => ({ status: r.status, body: r.body as unknown })),
      ),
    );
    return answers;
  } finally {
    await fixture.close();
  }
}

describe('adversary 21: SERIALIZABLE oneCommit claims of different keys', () => {
  it('ten new keys at once all succeed (oneCommit)', async () => {
    const answers = await scenario(true);
    expect(answers.map((a) => a.status)).toEqual(Array(10).fill(201));
  }, 60_000);

  it('control: without oneCommit', async () => {
    const answers = await scenario(false);
    expect(answers.map((a) => a.status)).toEqual(Array(10).fill(201));
  }, 60_000);
});
