import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 50b: a first phase run beside a write of the handler's own (`Promise.all`)
 * that touches the same row.
 *
 * The app (the pool seam, node-postgres): `POST /debit-one` (`@Idempotent({ oneCommit: true })`)
 * runs `Promise.all([phases.run('debited', work), pool.query('UPDATE accounts SET touched_at =
 * now() WHERE id = 1')])`, the phase's work (one parameter) updating the same account's
 * balance; then `finish()`. `POST /debit-def` is the same on a default `@Idempotent()` route.
 *
 * What happens: the handler's own `UPDATE` beside the phase is a statement of the request's
 * transaction: with the claim handed to the phase (request-transaction.ts `handClaimTo`), the
 * request's transaction opens a second connection of its own (`connection()`, `opening ??=
 * acquire(...)`) and its `UPDATE` takes the account's row lock there, held until the request
 * commits. The phase's `UPDATE` on the claim's connection then waits on that lock; the request
 * commits only once the handler returns, and the handler waits on the phase: nothing ever
 * ends. PostgreSQL sees no deadlock (one side is idle in transaction, waiting on Node). No
 * deadline applies: the client waits for ever, the key is held for ever (on `oneCommit` the
 * uncommitted claim's advisory lock: every duplicate 409 after `claimWaitMs`, for ever; by
 * default the heartbeat renews the lease for ever), two connections of the pool are held for
 * ever, and the app cannot even shut down (`app.close()` waits on it). The library refuses the
 * same hazard in sequence (`PhaseOrderError`, phase-runner.service.ts: "a phase that touches the
 * same rows would wait on it forever"), but not when the write starts while the phase runs
 * (phase-runner.service.ts:158 checks `begun` only at the phase's start).
 *
 * Expected: an answer: the write beside the running phase refused at once with a clear error
 * (as `PhaseOrderError` refuses it before), stored and replayed; or both run, as without the
 * library. Never a request, a key and two connections held for ever.
 *
 * Control: `POST /debit-plain`, the same handler with no `@Idempotent()`: 201 at once.
 *
 * Severity: high (a hang: the key held for ever, connections held, the app cannot stop).
 *
 * Fixed: a statement of the request's own sent while one of its phases runs is refused at
 * once (`StatementBesidePhaseRefusedError`, 500 `statement_beside_phase`, nothing stored), as
 * `PhaseOrderError` refuses the order before; phases.md says to await the phase first.
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

class DebitBody {
  amount!: number;
}

@Controller()
class DebitController {
  constructor(private readonly phases: PhaseRunner) {}

  private async debit(body: DebitBody) {
    await Promise.all([
      this.phases.run('debited', async () => {
        await sleep(100);
        await pool.query('UPDATE accounts SET balance = balance - $1 WHERE id = 1', [body.amount]);
        return { debited: body.amount };
      }),
      pool.query('UPDATE accounts SET touched_at = now() WHERE id = 1'),
    ]);
    return this.phases.finish(async () => ({ ok: true, amount: body.amount }));
  }

  @Post('debit-one')
  @Idempotent({ oneCommit: true })
  one(@Body() body: DebitBody) {
    return this.debit(body);
  }

  @Post('debit-def')
  @Idempotent()
  def(@Body() body: DebitBody) {
    return this.debit(body);
  }

  @Post('debit-plain')
  plain(@Body() body: DebitBody) {
    return this.debit(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, leaseMs: 1000, claimWaitMs: 300 }),
    }),
  ],
  controllers: [DebitController],
})
class DebitModule {}

describe('adversary 50b: a phase beside a write of the request on the same row hangs', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv50b_beside', {
      module: DebitModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, touched_at timestamptz)',
        );
        await admin.query('INSERT INTO accounts VALUES (1, 1000, NULL)');
      },
    });
  }, 60_000);
  // The hung sessions are ended, so that the app can close.
  afterEach(async () => {
    await fixture.admin.query(
      'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = $1',
      ['idle in transaction'],
    );
    await sleep(500);
  });
  afterAll(async () => fixture?.close(), 60_000);

  const post = (path: string, key: string | undefined, body: object) => {
    const r = request(fixture.app.getHttpServer()).post(path);
    if (key) r.set('Idempotency-Key', key);
    return r
      .send(body)
      .timeout(5000)
      .then(
        (res) => ({ status: res.status, body: res.body as unknown }),
        (error: Error) => ({ status: 0, body: error.message }),
      );
  };

  const balance = async () =>
    Number(
      (await fixture.admin.query('SELECT balance FROM accounts WHERE id = 1')).rows[0].balance,
    );

  /**
   * The chosen outcome: the write beside the running phase is refused at once (500
   * `statement_beside_phase`, nothing stored), so the request answers; its retries, once the
   * phase has settled, meet the refusal again or resume after the phase (201), and the debit is
   * made at most once, exactly once where a 201 was answered.
   */
  const answersOnce = async (path: string, key: string) => {
    const before = await balance();
    const first = await post(path, key, { amount: 10 });
    expect(first).toMatchObject({ status: 500, body: { code: 'statement_beside_phase' } });
    const later: { status: number; body: unknown }[] = [];
    for (let i = 0; i < 3; i++) {
      await sleep(400);
      later.push(await post(path, key, { amount: 10 }));
    }
    for (const answer of later) {
      const code = (answer.body as { code?: string }).code;
      expect([201, 409, 500]).toContain(answer.status);
      if (answer.status === 500) expect(code).toBe('statement_beside_phase');
      if (answer.status === 409) expect(code).toBe('key_in_progress');
    }
    const debited = before - (await balance());
    const answered = later.some((answer) => answer.status === 201);
    expect(debited).toBe(answered ? 10 : debited === 0 ? 0 : 10);
    // A 201, once given, is the key's answer: replayed.
    const firstOk = later.findIndex((answer) => answer.status === 201);
    if (firstOk >= 0) {
      for (const answer of later.slice(firstOk)) expect(answer).toEqual(later[firstOk]);
    }
  };

  it('oneCommit: refused at once (500 statement_beside_phase), the debit at most once (was: no answer for ever, the key held)', async () => {
    await answersOnce('/debit-one', 'beside-one');
  }, 30_000);

  it('default @Idempotent(): refused at once (500 statement_beside_phase), the debit at most once (was: no answer for ever, the key held)', async () => {
    await answersOnce('/debit-def', 'beside-def');
  }, 30_000);

  it('control: the same handler without @Idempotent() answers 201 at once', async () => {
    const res = await post('/debit-plain', undefined, { amount: 1 });
    expect(res.status).toBe(201);
  });
});
