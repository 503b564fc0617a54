/**
 * Adversary 100 (orm): a phase's work that catches the refusal of its own session-level
 * advisory lock (`SessionAdvisoryLockRefusedError`) or session setting and goes on is refused at
 * the phase's commit, and that refusal is STORED as the key's answer (a bare 500, replayed). The
 * same code in the handler (no phase) answers 500 `transaction_aborted`, nothing stored, as
 * documented. The phase's `TransactionAbortedError` is classified 'final' by
 * `PhaseRunner.guard` and by `onHandlerError`, where `commitAnswer` gives
 * `classifyCommitError` (never stored) for the same error.
 *
 * User code:
 *
 *   @Post() @Idempotent() async charge(@Body() b) {
 *     await this.phases.run('charge', async (m) => {
 *       try { await m.query('SELECT pg_advisory_lock(42)'); }      // "best effort" serialization
 *       catch { /* lock not available: go on without it *\/ }
 *       await m.insert(Entry, { tag: b.tag });
 *       return { ok: true };
 *     });
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/claim/postgres-claim.store.ts `commitPhase` → `commitWith` → `commitNow` →
 * `refusedEnd` throws `TransactionAbortedError(SessionAdvisoryLockRefusedError)`;
 * lib/phases/phase-runner.service.ts `guard` → lib/transaction/failure.ts
 * `classifyHandlerError` → `classifyAnew(TransactionAbortedError)` → classify(cause): not one
 * of the four refusals, not a database error → 'final', rethrown as is;
 * lib/transaction/handler-failure.ts `onHandlerError` → 'final' → the filters' 500 is stored by
 * `commitAnswer` (`withoutEffects`: `refusalAnswer` is undefined for it). Outside a phase the
 * same refusal reaches `commitAnswer`'s catch → `classifyCommitError` → 500
 * `transaction_aborted`, released.
 *
 * Docs quote (docs/guides/transactions.md, the table): "the handler takes or releases a
 * session-level advisory lock ... `SessionAdvisoryLockRefusedError` ..., as the filters render
 * it; caught and answered anyway: 500 `transaction_aborted`"; and "Code in the request may
 * nest the transaction, never end it ... a handler that catches the refusal and answers anyway
 * gets 500 `transaction_aborted`."
 *
 * Severity: medium (a wrong answer stored for good: an unclear bare 500 without its code, the
 * key spent; the route's answer depends on whether the code sits in a phase).
 *
 * Fails now (verified unskipped): in a phase: statuses ['500', '500 replayed'], expected
 * ['500 transaction_aborted', '500 transaction_aborted'] (not replayed). Control: in the
 * handler: ['500 transaction_aborted', '500 transaction_aborted'].
 *
 * Suggested fix: `classifyHandlerError` (or `guard`) treats a `TransactionAbortedError` whose
 * cause is a `TransactionControlRefusedError` as `classifyCommitError` does (a `retry` with
 * `IdempotencyTransactionAbortedError`), so a phase's refused commit answers as the request's
 * own refused commit; or say in the guide that in a phase it is stored.
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
 * docs/guides/transactions.md and docs/reference/problems.md say so.
 */
import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, type EntityManager, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv100_lock_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

async function bestEffortLocked(m: EntityManager, tag: string): Promise<void> {
  try {
    await m.query('SELECT pg_advisory_lock(42)');
  } catch {
    // lock not available: go on without it
  }
  await m.insert(Entry, { tag });
}

@Controller()
class ChargeController {
  constructor(
    private readonly phases: PhaseRunner,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  @Post('handler')
  @Idempotent()
  async handler(@Body() b: { tag: string }) {
    await bestEffortLocked(this.dataSource.manager, b.tag);
    return { tag: b.tag };
  }

  @Post('phase')
  @Idempotent()
  async phase(@Body() b: { tag: string }) {
    await this.phases.run('charge', async (m) => {
      await bestEffortLocked(m, b.tag);
      return { ok: true };
    });
    return { tag: b.tag };
  }
}

describe('adversary 100 orm: an advisory-lock refusal caught inside a phase', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv100_orm_phase_lock', {
      controllers: [ChargeController],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv100_lock_entries (id serial PRIMARY KEY, tag text NOT NULL)',
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
        'SELECT tag FROM public.adv100_lock_entries WHERE tag = $1',
        [tag],
      )
    ).rows.map((r) => r.tag);
    return { statuses: [statusOf(first), statusOf(again)], rows };
  }

  const aborted = '500 transaction_aborted';

  it('control: caught in the handler and gone on: 500 transaction_aborted, nothing stored', async () => {
    expect(await scenario('handler', 'h1')).toEqual({ statuses: [aborted, aborted], rows: [] });
  }, 30_000);

  it('caught inside a phase and gone on: 500 transaction_aborted, nothing stored', async () => {
    expect(await scenario('phase', 'p1')).toEqual({ statuses: [aborted, aborted], rows: [] });
  }, 30_000);
});
