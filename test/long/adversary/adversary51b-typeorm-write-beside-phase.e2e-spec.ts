import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type DataSource } from 'typeorm';
import request from 'supertest';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 51b: the documented refusal of a write beside a running phase, on TypeORM.
 *
 * The app (TypeORM, READ COMMITTED): `POST /debit-def` (`@Idempotent()`) and `POST /debit-one`
 * (`@Idempotent({ oneCommit: true })`) run, in one `Promise.all`, a phase that debits an
 * account (through its `manager`) and a write of the handler's own outside it
 * (`dataSource.query('UPDATE accounts SET touched_at = now() WHERE id = 2')`, another row):
 * the case phases.md rule 9 and problems.md describe (`Promise.all([phases.run(...),
 * repository.save(...)])`); then `finish()`.
 *
 * What happens: not `statement_beside_phase`: the refusal (request-transaction.ts:1082,
 * `StatementBesidePhaseRefusedError`) is thrown inside TypeORM's `query()` try block, which
 * wraps it in a `QueryFailedError`: since e190a90, a runner's `connect()` before the first
 * statement answers a stand-in client (lazy-transaction.ts `unopened()`), whose `query()`
 * opens the connection, so the refusal now comes from `databaseConnection.query(...)` (inside
 * the try) instead of `await this.connect()` (before it). `classifyHandlerError`
 * (failure.ts:91) knows only the bare error, so the handler's error is taken as its answer:
 * Nest's 500 "Internal server error" (no problem+json, no `statement_beside_phase`), STORED
 * as the key's final answer (the row `done`) and replayed to every retry: the documented
 * remedy (a retry resumes after the committed phases) never passes. Observed: default route,
 * the phase still running when the error was stored is then fenced out (no debit, 500 for
 * ever); `oneCommit`, the phase committed its debit and the key answers "Internal server
 * error" for ever, though its effect was made.
 *
 * Expected (problems.md): 500 problem+json `statement_beside_phase`, nothing stored, lease
 * released; the phase's debit stays, and a retry resumes after it: the debit made exactly
 * once, and a 201, once given, replayed.
 *
 * Control: the same handler on the pool seam is adversary50b-phase-beside-write-hangs (500
 * `statement_beside_phase`, passing).
 *
 * Severity: medium (a wrong, final, stored answer where the docs promise a refusal not stored
 * and a retry that resumes; nothing runs twice). The same wrapping hides the refusal of a read
 * that opens the transaction beside a phase (adversary51b-view-read-beside-phase's reads, on
 * TypeORM).
 */
class DebitBody {
  amount!: number;
}

@Controller()
class DebitController {
  constructor(
    private readonly phases: PhaseRunner,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  private async debit(body: DebitBody) {
    await Promise.all([
      this.phases.run('debited', async (manager) => {
        await manager.query('UPDATE accounts SET balance = balance - $1 WHERE id = 1', [
          body.amount,
        ]);
        return { debited: body.amount };
      }),
      this.dataSource.query('UPDATE accounts SET touched_at = now() WHERE id = 2'),
    ]);
    return this.phases.finish(async () => ({ ok: true, amount: body.amount }));
  }

  @Post('debit-def')
  @Idempotent()
  def(@Body() body: DebitBody) {
    return this.debit(body);
  }

  @Post('debit-one')
  @Idempotent({ oneCommit: true })
  one(@Body() body: DebitBody) {
    return this.debit(body);
  }
}

describe('adversary 51b: a write beside a running phase, on TypeORM', () => {
  let fixture: TypeormApp;
  beforeAll(async () => {
    fixture = await startTypeormApp('adv51b_typeorm_beside', {
      controllers: [DebitController],
      max: 6,
      idempotency: { globalKeys: true, leaseMs: 1000 },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE accounts (id int PRIMARY KEY, balance int NOT NULL, touched_at timestamptz)',
        );
        await admin.query('INSERT INTO accounts VALUES (1, 1000, NULL), (2, 0, NULL)');
      },
    });
  }, 60_000);
  afterAll(async () => fixture?.close());

  const post = (path: string, key: string) =>
    request(fixture.app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', key)
      .send({ amount: 10 })
      .timeout(5000)
      .then(
        (res) => ({
          status: res.status,
          body: res.body as unknown,
          type: String(res.headers['content-type']),
          replayed: res.headers['idempotent-replayed'] as string | undefined,
        }),
        (error: Error) => ({ status: 0, body: error.message, type: '', replayed: undefined }),
      );
  const balance = async () =>
    Number(
      (await fixture.admin.query('SELECT balance FROM accounts WHERE id = 1')).rows[0].balance,
    );

  const refusedThenResumed = async (path: string, key: string) => {
    const before = await balance();
    const first = await post(path, key);
    expect({ status: first.status, body: first.body, type: first.type }).toEqual({
      status: 500,
      body: expect.objectContaining({ code: 'statement_beside_phase' }),
      type: expect.stringContaining('application/problem+json'),
    });
    // Not stored: the retry is no replay of that 500. While the phase beside it still runs
    // (or its lease, renewed by the phase's commit, lasts), the retry is told 409.
    let retry = await post(path, key);
    for (let i = 0; i < 40 && retry.status === 409; i++) {
      await new Promise((resolve) => setTimeout(resolve, 250));
      retry = await post(path, key);
    }
    expect(retry.replayed).toBeUndefined();
    expect([201, 500]).toContain(retry.status);
    expect(before - (await balance())).toBe(10);
  };

  it('default @Idempotent(): 500 statement_beside_phase, not stored, the debit once', async () => {
    await refusedThenResumed('/debit-def', 'beside-def');
  }, 30_000);

  it('oneCommit: 500 statement_beside_phase, not stored, the debit once', async () => {
    await refusedThenResumed('/debit-one', 'beside-one');
  }, 30_000);
});
