import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 21: a key held by a `oneCommit` route's uncommitted claim stalls the claim
 * batcher of every other route of the process, for every tenant, for as long as that route's
 * handler runs: unrelated requests wait seconds, then 503.
 *
 * What the app does (Express, pool, `tenant` from a header): `POST /transfers` is
 * `@Idempotent({ oneCommit: true })` (a slow transfer: 2.5 s of work in its transaction);
 * `POST /notes` is a plain `@Idempotent()` route; `databaseTimeoutMs: 2000`. Tenant `a` sends
 * key K to /transfers, then (a buggy client, or the retry of the same request landing on a
 * process of a rolling deploy where the route is not oneCommit yet) key K to /notes. Tenant
 * `b` then sends a fresh key to /notes.
 *
 * What happens: the plain route's claim goes through `ClaimBatcher`, which sends one claim
 * statement at a time per process (claim-batcher.ts:24, CLAIMS_IN_FLIGHT = 1). CLAIM's
 * `INSERT ... ON CONFLICT DO NOTHING` (postgres-statements.ts:33-38) waits on the row that
 * /transfers inserted and has not committed (claim-at-begin.ts: the claim is the first
 * statement of the request's own transaction); unlike `claimIn`, nothing bounds the wait by
 * `claimWaitMs` (no `lock_timeout`, postgres-claim.store.ts:339 runs CLAIM plainly). The
 * batcher's only statement is blocked, so tenant b's claim queues behind it: seen, tenant a's
 * duplicate answered 503 after 2 s (its statement's `databaseTimeoutMs`, the connection
 * dropped), and only then tenant b's claim sent, answered after ~1950 ms instead of at once.
 * With a few more requests queued (each its own 2 s deadline counted from its arrival) or a
 * longer handler, they are 503s too.
 *
 * What should happen: idempotency-options.interface.ts (oneCommit): "A request with the same
 * key waits on a claim that is not committed yet for at most `claimWaitMs`, then gets the
 * stored answer, or 409 with `Retry-After`"; `claimWaitMs`: "It holds a connection while it
 * waits: keep it short". A request of another tenant and another key should not wait on it at
 * all. Control: /transfers without oneCommit (claim committed alone first): the duplicate is
 * answered at once (422, another route's body) and tenant b's request at once.
 *
 * Why it matters: one request (any tenant's, one key reused across routes, or a retry meeting
 * a process whose route is not oneCommit during the roll-out of the option) makes every
 * plain idempotent route of the process unavailable for the length of a oneCommit handler;
 * past `databaseTimeoutMs` every claim queued meanwhile is a 503. Severity: high (cross-
 * tenant availability; no double effect).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function controllerFor(oneCommit: boolean) {
  @Controller()
  class RoutesController {
    @Post('transfers')
    @Idempotent({ oneCommit })
    async transfer(@Body() body: { text: string }) {
      await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
      await sleep(2500);
      return { text: body.text };
    }

    @Post('notes')
    @Idempotent()
    async note(@Body() body: { text: string }) {
      await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
      return { text: body.text };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        useFactory: () => ({
          tenant: (req) => String(req.headers['x-tenant']),
          pool,
          claimWaitMs: 300,
          databaseTimeoutMs: 2000,
        }),
      }),
    ],
    controllers: [RoutesController],
  })
  class RoutesModule {}
  return RoutesModule;
}

async function scenario(oneCommit: boolean) {
  const fixture: PoolApp = await startPoolApp(`adv21_batch_${oneCommit ? 'one' : 'two'}`, {
    module: controllerFor(oneCommit),
    max: 6,
    usePool: (started) => (pool = started),
    setup: async (admin) => {
      await admin.query('CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL)');
    },
  });
  try {
    const server = fixture.app.getHttpServer();
    const post = (tenant: string, path: string, key: string, text: string) => {
      const began = Date.now();
      return request(server)
        .post(path)
        .set('x-tenant', tenant)
        .set('Idempotency-Key', key)
        .send({ text })
        .then((response) => ({ status: response.status, ms: Date.now() - began }));
    };
    const transfer = post('a', '/transfers', 'k-shared', 't1');
    await sleep(300);
    const duplicate = post('a', '/notes', 'k-shared', 'n1');
    await sleep(100);
    const other = await post('b', '/notes', 'k-other', 'n2');
    return { transfer: await transfer, duplicate: await duplicate, other };
  } finally {
    await fixture.close();
  }
}

describe('adversary 21: a oneCommit claim stalls the claim batcher of plain routes', () => {
  it("another tenant's fresh key on a plain route is answered at once (oneCommit)", async () => {
    const { transfer, duplicate, other } = await scenario(true);
    expect(transfer.status).toBe(201);
    // Another tenant, another key: nothing to wait for (seen: ~1950 ms).
    expect(other.status).toBe(201);
    expect(other.ms).toBeLessThan(1000);
    // The same key on another route: bounded by claimWaitMs (seen: 503 after ~2000 ms).
    expect(duplicate.status).not.toBe(503);
    expect(duplicate.ms).toBeLessThan(1200);
  }, 30_000);

  it('control: without oneCommit, both are answered at once', async () => {
    const { transfer, duplicate, other } = await scenario(false);
    expect(transfer.status).toBe(201);
    expect(duplicate.status).toBe(422);
    expect(duplicate.ms).toBeLessThan(1200);
    expect(other.status).toBe(201);
    expect(other.ms).toBeLessThan(1000);
  }, 30_000);
});
