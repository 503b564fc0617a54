/**
 * Adversary 100 (orm): a refusal that is "never stored" (`runner_connected_outside_request`,
 * `cursor_open`), met inside a `PhaseRunner.run()` phase's work, caught there and turned into
 * the work's own error (a `ConflictException`, or `new Error('import failed', { cause })`), is
 * STORED as the key's answer and replayed. The same code outside a phase (in the handler) is
 * answered with the refusal, nothing stored. The rule of adversary 98 reads the refusal off
 * the request's transaction, but a phase runs in a transaction of its own.
 *
 * User code:
 *
 *   @Post() @Idempotent() @UseGuards(ReadingGuard) async charge(@Body() b) {
 *     await this.phases.run('charge', async (m) => {
 *       try { await this.uow.runner.manager.insert(Entry, { tag: b.tag }); }  // refused
 *       catch { throw new ConflictException('could not record'); }           // a service's wrap
 *       return { ok: true };
 *     });
 *     return { tag: b.tag };
 *   }
 *   // or: a phase that streams rows and writes per row (cursor_open), its catch wrapping:
 *   //   catch (e) { throw new Error('import failed', { cause: e }); }
 *
 * Code path: lib/claim/postgres-claim.store.ts `commitPhase` runs the work in
 * `this.database.transaction(true)` (its own RequestTransaction; the refusal is noted there,
 * `refuse`), and throws the work's error before its commit; lib/phases/phase-runner.service.ts
 * `guard` → `classifyHandlerError(ConflictException)` = 'final', rethrown as is;
 * lib/transaction/handler-failure.ts `onHandlerError` → `answerOfRefused(transaction.refusal)`
 * reads the REQUEST's transaction (no refusal there) → `classifyHandlerError` 'final' → the
 * 409 / 500 goes to the filters and `commitAnswer` stores it (`withoutEffects` also reads only
 * the request's transaction's refusal).
 *
 * Docs quote (docs/guides/transactions.md): "That is the answer whatever the handler made of
 * the refusal: caught and turned into its own exception (a `ConflictException`, a plain
 * `Error`), or met inside a `PhaseRunner` phase or `finish()`, it is still the 500
 * `runner_connected_outside_request`, never stored, so a retry after the fix runs the work."
 *
 * Severity: high (a wrong answer stored for good: the key's answer is the handler's 409 / 500
 * that the library's own refusal caused; a retry after the fix replays it, the work never runs).
 *
 * Fails now (verified unskipped): runner refused in a phase, caught, 409: statuses ['409',
 * '409 replayed'], expected ['500 runner_connected_outside_request' x2]; cursor_open in a
 * phase, caught, `new Error(..., { cause })`: ['500', '500 replayed'], expected
 * ['500 cursor_open' x2]; the refusal let out of the phase (the library's own
 * `IdempotencyRunnerConnectedOutsideRequestError` that `guard` throws) and caught around
 * `phases.run()` by the handler, answered 409: ['409', '409 replayed']. Controls: the same catch in the handler (no phase) is answered
 * with the refusal, nothing stored.
 *
 * Suggested fix: a phase's transaction's refusal reaches the request: `commitPhase` (or
 * `PhaseRunner.guard`) answers `refusalAnswer(phaseTransaction.refusal)` in place of the
 * work's own error when there is one (as `onHandlerError` does), or marks the request's
 * context/transaction refused so that `onHandlerError` and `withoutEffects` see it.
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
import {
  Body,
  type CanActivate,
  ConflictException,
  Controller,
  type ExecutionContext,
  type INestApplication,
  Inject,
  Injectable,
  Post,
  Scope,
  UseGuards,
} from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn, type QueryRunner } from 'typeorm';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv100_phase_caught_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

@Injectable({ scope: Scope.REQUEST })
class UnitOfWork {
  readonly runner: QueryRunner;
  constructor(@InjectDataSource() dataSource: DataSource) {
    this.runner = dataSource.createQueryRunner();
  }
}

@Injectable()
class ReadingGuard implements CanActivate {
  constructor(@Inject(UnitOfWork) private readonly uow: UnitOfWork) {}
  async canActivate(context: ExecutionContext): Promise<boolean> {
    context
      .switchToHttp()
      .getResponse<{ once(event: 'close', listener: () => void): unknown }>()
      .once('close', () => void this.uow.runner.release());
    await this.uow.runner.query('SELECT 1');
    return true;
  }
}

@Controller()
class ChargeController {
  constructor(
    @Inject(UnitOfWork) private readonly uow: UnitOfWork,
    private readonly phases: PhaseRunner,
  ) {}

  @Post('handler-409')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async handler409(@Body() b: { tag: string }) {
    try {
      await this.uow.runner.manager.insert(Entry, { tag: b.tag });
    } catch {
      throw new ConflictException('could not record');
    }
    return { tag: b.tag };
  }

  @Post('phase-409')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async phase409(@Body() b: { tag: string }) {
    await this.phases.run('charge', async () => {
      try {
        await this.uow.runner.manager.insert(Entry, { tag: b.tag });
      } catch {
        throw new ConflictException('could not record');
      }
      return { ok: true };
    });
    return { tag: b.tag };
  }

  /** The phase not catching it: the handler wraps `phases.run()` (the library's 500 it throws). */
  @Post('around-phase-409')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async aroundPhase409(@Body() b: { tag: string }) {
    try {
      await this.phases.run('charge', async () => {
        await this.uow.runner.manager.insert(Entry, { tag: b.tag });
        return { ok: true };
      });
    } catch {
      throw new ConflictException('could not charge');
    }
    return { tag: b.tag };
  }

  @Post('handler-cursor')
  @Idempotent()
  async handlerCursor(@Body() b: { tag: string }) {
    try {
      await this.copyRows(this.dataSourceManager(), b.tag);
    } catch (error) {
      throw new Error('import failed', { cause: error });
    }
    return { tag: b.tag };
  }

  @Post('phase-cursor')
  @Idempotent()
  async phaseCursor(@Body() b: { tag: string }) {
    await this.phases.run('import', async (m) => {
      try {
        await this.copyRows(m, b.tag);
      } catch (error) {
        throw new Error('import failed', { cause: error });
      }
      return { ok: true };
    });
    return { tag: b.tag };
  }

  private dataSourceManager() {
    return this.dataSource.manager;
  }

  @InjectDataSource() private readonly dataSource!: DataSource;

  /** A write per streamed row: refused with cursor_open. */
  private async copyRows(m: DataSource['manager'], tag: string) {
    const stream = await m
      .createQueryBuilder()
      .select('s.n', 'n')
      .from('(SELECT generate_series(1, 1000) AS n)', 's')
      .stream();
    for await (const row of stream as AsyncIterable<{ n: number }>) {
      await m.insert(Entry, { tag: `${tag}-${row.n}` });
    }
  }
}

describe('adversary 100 orm: a never-stored refusal caught inside a phase and rethrown as the work’s own error', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv100_orm_phase_caught', {
      controllers: [ChargeController],
      providers: [UnitOfWork, ReadingGuard],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv100_phase_caught_entries (id serial PRIMARY KEY, tag text NOT NULL)',
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
    return [statusOf(first), statusOf(again)];
  }

  it('control: the runner refusal caught in the handler and answered 409: the refusal, nothing stored', async () => {
    const refused = '500 runner_connected_outside_request';
    expect(await scenario('handler-409', 'c1')).toEqual([refused, refused]);
  }, 30_000);

  it('control: the cursor refusal caught in the handler and wrapped in an Error with cause: the refusal, nothing stored', async () => {
    expect(await scenario('handler-cursor', 'c2')).toEqual(['500 cursor_open', '500 cursor_open']);
  }, 30_000);

  it('the runner refusal caught inside a phase and answered 409: still the refusal, nothing stored', async () => {
    const refused = '500 runner_connected_outside_request';
    expect(await scenario('phase-409', 'p1')).toEqual([refused, refused]);
  }, 30_000);

  it('the runner refusal thrown out of a phase, caught around phases.run() and answered 409: still the refusal, nothing stored', async () => {
    const refused = '500 runner_connected_outside_request';
    expect(await scenario('around-phase-409', 'p3')).toEqual([refused, refused]);
  }, 30_000);

  it('the cursor refusal caught inside a phase and wrapped in an Error with cause: still the refusal, nothing stored', async () => {
    expect(await scenario('phase-cursor', 'p2')).toEqual(['500 cursor_open', '500 cursor_open']);
  }, 30_000);
});
