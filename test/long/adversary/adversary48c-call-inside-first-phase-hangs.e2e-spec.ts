import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 48c (fourth break): a `oneCommit` route whose first phase calls
 * `PhaseRunner.call()` (or `run()`) inside its work: the request hangs for ever, holding the
 * key and a connection.
 *
 * The app (the pool seam): `POST /one` (`@Idempotent({ oneCommit: true, leaseMs: 1000 })`)
 * runs `run('order', async () => { INSERT the order; return this.phases.call('psp', ...) })`:
 * a phase that writes the order, then charges through `call()` (a service of the app's that
 * charges with `call()`, used from inside a phase). `POST /nested-run` does the same with a
 * nested `run('line', ...)`. Then `finish()`.
 *
 * What happens: the outer work has one parameter, so the claim is handed to the phase
 * (phase-runner.service.ts:160, request-transaction.ts:253-272: the request's claim state is
 * 'handed' until the phase ends). The inner `call()` (phase-runner.service.ts:128) or `run()`
 * (:160-161: `holdsClaim` is false while 'handed', so it commits the claim alone first) calls
 * `commitClaimAlone`, which, 'handed', waits for the phase to settle (request-transaction.ts:
 * 400-401); the phase waits for it: a deadlock. The heartbeat keeps renewing inside the phase's
 * transaction (`renewsInside`), so neither the lease nor the idle bound
 * (`idle_in_transaction_session_timeout`) ever frees the uncommitted claim: the client never
 * gets an answer, every retry waits `claimWaitMs` and gets 409, past any number of leases, and
 * the connection is never given back (the app cannot even close).
 *
 * Expected: as on the same route without `oneCommit`: 201 at once (the phase's order, the
 * call recorded), replayed on a retry.
 *
 * Control: `POST /def` and `POST /def-nested-run`, the same handlers without `oneCommit`: 201,
 * replayed. Pass.
 *
 * Severity: high (a hang: the key held for ever and a pool connection leaked per request,
 * while the process lives).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const pspCalls: string[] = [];

class OrderBody {
  text!: string;
}

@Controller()
class OrdersController {
  constructor(private readonly phases: PhaseRunner) {}

  private async withCall(body: OrderBody) {
    const paid = await this.phases.run('order', async () => {
      await pool.query('INSERT INTO notes (text) VALUES ($1)', [`${body.text}-order`]);
      return this.phases.call('psp', async ({ idempotencyKey }) => {
        pspCalls.push(idempotencyKey);
        return { paid: true };
      });
    });
    return this.phases.finish(async () => ({ paid, text: body.text }));
  }

  private async withRun(body: OrderBody) {
    const made = await this.phases.run('order', async () => {
      await pool.query('INSERT INTO notes (text) VALUES ($1)', [`${body.text}-order`]);
      return this.phases.run('line', async () => {
        await pool.query('INSERT INTO notes (text) VALUES ($1)', [`${body.text}-line`]);
        return { line: true };
      });
    });
    return this.phases.finish(async () => ({ made, text: body.text }));
  }

  @Post('one')
  @Idempotent({ oneCommit: true, leaseMs: 1000 })
  one(@Body() body: OrderBody) {
    return this.withCall(body);
  }

  @Post('def')
  @Idempotent({ leaseMs: 1000 })
  byDefault(@Body() body: OrderBody) {
    return this.withCall(body);
  }

  @Post('nested-run')
  @Idempotent({ oneCommit: true, leaseMs: 1000 })
  nestedRun(@Body() body: OrderBody) {
    return this.withRun(body);
  }

  @Post('def-nested-run')
  @Idempotent({ leaseMs: 1000 })
  defNestedRun(@Body() body: OrderBody) {
    return this.withRun(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, claimWaitMs: 300 }),
    }),
  ],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 48c: call() or run() inside a oneCommit first phase', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv48c_nested', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    if (!fixture) return;
    // A hung request holds its connection for ever, so the pool never ends: past a bound, the
    // database is dropped here (its sessions killed), as the fixture would have.
    const closed = await Promise.race([
      fixture.close().then(() => true),
      sleep(5000).then(() => false),
    ]);
    if (closed) return;
    await fixture.admin.end().catch(() => undefined);
    await fixture.database.drop();
  }, 30_000);

  const post = (path: string, key: string) =>
    request(fixture.app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', key)
      .send({ text: key })
      .timeout(4000);

  const answersOnce = async (path: string, key: string) => {
    const first = await post(path, key).catch((error: Error) => error);
    // A retry past three leases is not told the key is still in progress.
    const again = await post(path, key).catch((error: Error) => error);
    expect(first).not.toBeInstanceOf(Error);
    expect(again).not.toBeInstanceOf(Error);
    if (first instanceof Error || again instanceof Error) return;
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
  };

  // Fixed by refusing, not as the header expected: the first phase of a oneCommit route holds
  // the claim uncommitted, so a phase inside its work cannot begin (its derived key must
  // outlast a crash, which needs the claim committed before the call). Refused at once with
  // what to do (NestedFirstPhaseError), stored as the handler's 500 with the claim (nothing of
  // the phase's work), and replayed: never a hang. phases.md rule 12 says so.
  const refusedOnce = async (path: string, key: string) => {
    const first = await post(path, key);
    const again = await post(path, key);
    expect(first.status).toBe(500);
    expect(again.status).toBe(500);
    expect(again.headers['idempotent-replayed']).toBe('true');
    const notes = await fixture.admin.query("SELECT 1 FROM notes WHERE text LIKE $1 || '-%'", [
      key,
    ]);
    expect(notes.rowCount).toBe(0);
  };

  it('oneCommit, call() inside the first phase: refused at once, stored, replayed (hung before)', async () => {
    const calls = pspCalls.length;
    await refusedOnce('/one', 'call-one');
    expect(pspCalls).toHaveLength(calls);
  }, 20_000);

  it('oneCommit, run() inside the first phase: refused at once, stored, replayed (hung before)', async () => {
    await refusedOnce('/nested-run', 'run-one');
  }, 20_000);

  it('control: call() inside a phase without oneCommit: 201, replayed', async () => {
    await answersOnce('/def', 'call-def');
    expect(pspCalls.filter((key) => key.endsWith(':psp'))).toHaveLength(1);
  }, 20_000);

  it('control: run() inside a phase without oneCommit: 201, replayed', async () => {
    await answersOnce('/def-nested-run', 'run-def');
  }, 20_000);
});
