import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 21: on a `oneCommit` route, a first phase that comes later than `leaseMs`
 * after the claim commits the claim alone with its lease already run out: a retry in the next
 * `leaseMs / 3` takes a live request's key over and runs the handler a second time, the
 * provider is called twice, and the first client gets 409 `lease_lost`.
 *
 * What the app does (Express, pool): `POST /payments` is `@Idempotent({ oneCommit: true,
 * leaseMs: 1000 })`; its handler first gets a quote from a pricing service (no database, 1.3 s
 * on a slow day), then charges the card in `phases.call('psp', ...)` (400 ms) with the derived
 * key, then inserts its row. The client's own timeout is 1.4 s: its retry with the same key
 * comes 1.45 s after the first request, while the first is charging the card.
 *
 * What happens: the claim's row is inserted (uncommitted) with `locked_until = now + leaseMs`
 * (CLAIM, postgres-statements.ts:35). No heartbeat runs while it is uncommitted
 * (run-owned.ts:196-211, `onClaimCommitted`). At 1.3 s `phases.call` commits it alone
 * (phase-runner.service.ts:124, request-transaction.ts `commitClaimAlone`): the committed row's
 * lease ended 0.3 s before. The heartbeat starts then, its first renewal only `leaseMs / 3`
 * later (lease-renewals.ts:130-142, `setInterval`, no renewal at start). The retry's claim
 * finds the row with `lease_expired` and takes it over (claim-or-decide `onExisting`,
 * TAKE_OVER): the handler runs again (quotes: 2), charges again with the same derived key
 * (charges: 2, one key), and commits; the first's phase result is fenced out: 409
 * `lease_lost` to the client that paid.
 *
 * What should happen: the oneCommit doc comment (idempotency-options.interface.ts): "the
 * first `PhaseRunner.run()` or `call()` commits the claim alone first (then as without it)";
 * without it the claim's lease is kept by the heartbeat from the claim on, and a request
 * whose worker is alive gets 409 `key_in_progress`, never a takeover (the design's lease
 * section). Control: the same route without oneCommit: the retry gets 409
 * key_in_progress, one quote, one charge, the first answered 201.
 *
 * Why it matters: a takeover of a live worker is the one thing the heartbeat exists to
 * prevent: two executions of the handler at once, the external call made twice (harmless only
 * if the provider dedupes the derived key, and at Stripe-like providers a concurrent second
 * call with the same key fails), and the client that was charged told its request was lost.
 * It needs only a handler that does some work before its first phase for longer than its
 * lease (a lease sized for the phase, not the preparation). Severity: high.
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let quotes = 0;
let charges: string[] = [];

function moduleFor(oneCommit: boolean) {
  @Controller()
  class PaymentsController {
    constructor(private readonly phases: PhaseRunner) {}

    @Post('payments')
    @Idempotent({ oneCommit, leaseMs: 1000 })
    async pay(@Body() body: { text: string }) {
      // A quote from the pricing service first (no database): 1.3 s on a slow day.
      quotes++;
      await sleep(1300);
      const charged = await this.phases.call('psp', async ({ idempotencyKey }) => {
        charges.push(idempotencyKey);
        await sleep(400);
        return { charged: true };
      });
      await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
      return { ...charged, text: body.text };
    }
  }
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        useFactory: () => ({ globalKeys: true, pool }),
      }),
    ],
    controllers: [PaymentsController],
  })
  class PaymentsModule {}
  return PaymentsModule;
}

async function scenario(oneCommit: boolean) {
  quotes = 0;
  charges = [];
  const fixture: PoolApp = await startPoolApp(`adv21_phase_${oneCommit ? 'one' : 'two'}`, {
    module: moduleFor(oneCommit),
    max: 4,
    usePool: (started) => (pool = started),
    setup: async (admin) => {
      await admin.query('CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL)');
    },
  });
  try {
    const post = () =>
      request(fixture.app.getHttpServer())
        .post('/payments')
        .set('Idempotency-Key', 'pay-1')
        .send({ text: 'pay-1' })
        .then((r) => ({ status: r.status, body: r.body as unknown }));
    const first = post();
    // The client's retry (its own timeout was 1.4 s), while the first is charging the card.
    await sleep(1450);
    const retry = post();
    const answers = { first: await first, retry: await retry };
    // The retry of the retry, once everything settled.
    await sleep(300);
    const last = await post();
    const [{ count }] = (
      await fixture.admin.query(`SELECT count(*)::int AS count FROM notes WHERE text = 'pay-1'`)
    ).rows as { count: number }[];
    return {
      ...answers,
      last,
      quotes,
      charges: charges.length,
      keys: new Set(charges).size,
      notes: count,
    };
  } finally {
    await fixture.close();
  }
}

describe('adversary 21: a oneCommit claim committed alone by a late first phase', () => {
  it('a retry while the first request charges gets 409, the handler runs once (oneCommit)', async () => {
    const outcome = await scenario(true);
    expect(outcome.retry.status).toBe(409);
    expect(outcome.quotes).toBe(1);
    expect(outcome.charges).toBe(1);
    expect(outcome.first.status).toBe(201);
    expect(outcome.notes).toBe(1);
  }, 30_000);

  it('control: without oneCommit', async () => {
    const outcome = await scenario(false);
    expect(outcome.retry.status).toBe(409);
    expect(outcome.quotes).toBe(1);
    expect(outcome.charges).toBe(1);
    expect(outcome.first.status).toBe(201);
    expect(outcome.notes).toBe(1);
  }, 30_000);
});
