/**
 * Adversary 100 (orm): a hand-written savepoint refused with `SavepointAcrossRunnersError`
 * (documented "500, rolled back, nothing stored") has its 500 STORED as the key's answer and
 * replayed; caught and turned into the handler's own 409, the 409 is stored too. The
 * guide promises nothing stored (like the four refusals of adversary 98), the reference says
 * "the handler's (500)", and the code treats it as the handler's final answer: a retry after
 * the fix (savepoints on one runner) replays the 500 for good.
 *
 * User code:
 *
 *   @Post() @Idempotent() async transfer(@Body() b) {
 *     const audit = this.dataSource.createQueryRunner();
 *     const ledger = this.dataSource.createQueryRunner();
 *     await ledger.startTransaction();
 *     try {
 *       await ledger.query('SAVEPOINT step');                      // withSavepoint helper
 *       await audit.query('INSERT INTO audit ...');                // another service's runner
 *       await ledger.query('ROLLBACK TO SAVEPOINT step');          // refused
 *       await ledger.commitTransaction();
 *     } catch (e) { await ledger.rollbackTransaction(); throw e; } finally { await audit.release(); await ledger.release(); }
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/data-layers/lazy-transaction.ts → `refuse(new SavepointAcrossRunnersError)`
 * (sets the transaction's `refused`); lib/transaction/handler-failure.ts `onHandlerError` →
 * `refusalAnswer(refusal)`: lib/transaction/failure.ts `classifyAnew` knows only four
 * refusals as never stored → undefined; `classifyHandlerError` → 'final'; the filters' 500 is
 * stored by `commitAnswer` → `withoutEffects` (undo to the claim, commit the answer).
 *
 * Docs quote: docs/guides/transactions.md: "such a statement that would reach another
 * runner's savepoints or work is refused before it is sent with `SavepointAcrossRunnersError`
 * (500, rolled back, nothing stored)"; docs/reference/problems.md says "the handler's (500)
 * ... the effects rolled back" (no word of storing): the two disagree, and the code stores.
 *
 * Severity: medium (a wrong/unclear answer stored for good: a bare 500 the library's refusal
 * caused, replayed after the app is fixed; the guide promises nothing stored).
 *
 * Fails now (verified unskipped): uncaught: statuses ['500', '500 replayed']; caught and
 * answered 409: ['409', '409 replayed']; expected the second try not replayed (nothing stored).
 * Control: the same savepoints on one runner: 201, replayed.
 *
 * Suggested fix: add `SavepointAcrossRunnersError` to the refusals `refusalAnswer` never
 * stores (its own code, 500, like `cursor_open`), or, if storing is meant, say so in the
 * guide (drop "nothing stored") and list it with the stated limit (COMMIT/BEGIN, session
 * settings, advisory locks).
 *
 * Fixed (session of 2026-12-06, sixth): lib/transaction/failure.ts now decides in one table
 * (`REFUSAL_FATES`, table-driven in failure.spec.ts, a spec that fails when a refusal of seam-
 * errors.ts is missing from it) what becomes of every refusal the transaction can record: `own`
 * (the four of adversary 98: their own code), `aborted` (`ConcurrentSaveFailedError`,
 * `NestedTransactionOpenAtCommitError`, `SavepointAcrossRunnersError`: 500 `transaction_aborted`),
 * both never stored whatever the handler threw after them, and `stored` (its code's COMMIT,
 * session locks and settings, ...: the handler's error answer stored when let out).
 * `refusalAnswer` (read by `onHandlerError` and `withoutEffects`) applies it;
 * `classifyHandlerError` answers a `TransactionAbortedError` of a caught refusal as
 * `classifyCommitError` does (500 `transaction_aborted`, not stored). `PhaseRunner` hands a
 * refusal met in a phase's own transaction (its work's, or its refused commit's) to the request's
 * (`RequestTransaction.refusedInPhase`), so phases answer by the same rule as the handler.
 * docs/guides/transactions.md and docs/reference/problems.md say so. The tests now also assert the
 * 500 `transaction_aborted`.
 */
import { Body, ConflictException, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Controller()
class TransferController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async steps(tag: string, acrossRunners: boolean) {
    const ledger = this.dataSource.createQueryRunner();
    const audit = acrossRunners ? this.dataSource.createQueryRunner() : ledger;
    await ledger.startTransaction();
    try {
      await ledger.query('SAVEPOINT step');
      await audit.query('INSERT INTO public.adv100_sp_audit (tag) VALUES ($1)', [tag]);
      await ledger.query('ROLLBACK TO SAVEPOINT step');
      await ledger.query('INSERT INTO public.adv100_sp_audit (tag) VALUES ($1)', [`${tag}-kept`]);
      await ledger.commitTransaction();
    } catch (error) {
      await ledger.rollbackTransaction();
      throw error;
    } finally {
      await ledger.release();
      if (audit !== ledger) await audit.release();
    }
  }

  @Post('one-runner')
  @Idempotent()
  async oneRunner(@Body() b: { tag: string }) {
    await this.steps(b.tag, false);
    return { tag: b.tag };
  }

  @Post('across')
  @Idempotent()
  async across(@Body() b: { tag: string }) {
    await this.steps(b.tag, true);
    return { tag: b.tag };
  }

  @Post('across-409')
  @Idempotent()
  async across409(@Body() b: { tag: string }) {
    try {
      await this.steps(b.tag, true);
    } catch {
      throw new ConflictException('could not transfer');
    }
    return { tag: b.tag };
  }
}

describe('adversary 100 orm: a savepoint refused across runners, stored', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv100_orm_savepoint_across', {
      controllers: [TransferController],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv100_sp_audit (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: string, tag: string) {
    const post = () =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${tag}`)
        .send({ tag });
    const first = await post();
    const again = await post();
    const statusOf = (r: request.Response) =>
      [
        String(r.status),
        (r.body as { code?: string }).code,
        r.headers['idempotent-replayed'] ? 'replayed' : undefined,
      ]
        .filter(Boolean)
        .join(' ');
    const rows = (
      await fixture.admin.query<{ tag: string }>(
        "SELECT tag FROM public.adv100_sp_audit WHERE tag = $1 OR tag LIKE $1 || '-%' ORDER BY id",
        [tag],
      )
    ).rows.map((r) => r.tag);
    return {
      statuses: [statusOf(first), statusOf(again)],
      replayed: [first, again].map((r) => Boolean(r.headers['idempotent-replayed'])),
      rows,
    };
  }

  it('control: the savepoints on one runner: 201, replayed, written once', async () => {
    const got = await scenario('one-runner', 'o1');
    expect(got.statuses).toEqual(['201', '201 replayed']);
    expect(got.rows).toEqual(['o1-kept']);
  }, 30_000);

  it('refused across runners: nothing stored, the retry runs again', async () => {
    const got = await scenario('across', 'a1');
    expect(got.replayed).toEqual([false, false]);
    expect(got.statuses).toEqual(['500 transaction_aborted', '500 transaction_aborted']);
    expect(got.rows).toEqual([]);
  }, 30_000);

  it('refused across runners, caught and answered 409: nothing stored, the retry runs again', async () => {
    const got = await scenario('across-409', 'b1');
    expect(got.replayed).toEqual([false, false]);
    expect(got.statuses).toEqual(['500 transaction_aborted', '500 transaction_aborted']);
    expect(got.rows).toEqual([]);
  }, 30_000);
});
