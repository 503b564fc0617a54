/**
 * Adversary 98 (orm): the refusal of a guard-connected runner (`RunnerConnectedOutsideRequestError`,
 * "500 runner_connected_outside_request ... nothing stored, lease released") met inside a
 * `PhaseRunner` phase or its `finish()` is STORED as the key's answer and replayed
 * (`Idempotent-Replayed: true`): the key is spent on the refusal, and a retry after the app is
 * fixed (its tenant set with `SET LOCAL`) never runs the work. Outside phases the same refusal is
 * given back, as documented.
 *
 * User code:
 *
 *   @Injectable({ scope: Scope.REQUEST })
 *   class UnitOfWork { readonly runner = this.dataSource.createQueryRunner(); ... }
 *   @Injectable() class ReadingGuard { async canActivate() {
 *     await this.uow.runner.query('SELECT 1'); return true; } }   // e.g. reads the tenant
 *   @Post() @Idempotent() @UseGuards(ReadingGuard) async charge(@Body() b) {
 *     await this.phases.run('charge', (m) => m.insert(Entry, { tag: `${b.tag}-charge` }) ...);
 *     return this.phases.finish(async () => {
 *       await this.uow.runner.manager.insert(Entry, { tag: b.tag });   // refused
 *       return { tag: b.tag };
 *     });
 *   }
 *
 * Code path: lib/phases/phase-runner.service.ts `guard()` turns the refusal into its
 * `IdempotencyRunnerConnectedOutsideRequestError` (`classifyHandlerError` → `failure.error`) and
 * throws that; lib/transaction/handler-failure.ts `onHandlerError` classifies the thrown error
 * again with `classifyHandlerError`, which knows the seam's `RunnerConnectedOutsideRequestError`
 * but not the library's `Idempotency…` wrapper: 'final', so the 500 is stored as the handler's
 * answer. (The same wrapper of `IdempotencyCursorOpenError`, `IdempotencySubscriber…`,
 * `IdempotencyStatementBesidePhaseError`, met inside a phase, likely takes the same road.)
 *
 * Docs quote: docs/guides/transactions.md: "is refused with `RunnerConnectedOutsideRequestError`:
 * the request rolls back and answers 500 `runner_connected_outside_request`, nothing stored";
 * docs/reference/problems.md: "refused, rolled back, nothing stored, lease released".
 *
 * Severity: high (a wrong stored answer: the key's answer is the refusal for good, a retry after
 * the fix replays it; the work never runs).
 *
 * Fails now (verified unskipped): in finish(): statuses ['500 runner_connected_outside_request',
 * '500 runner_connected_outside_request replayed'], rows ['pf-charge']; inside a phase's work
 * (refusal caught there, the phase then refused at its commit): the same two statuses, rows [].
 * Expected the second answer not replayed (run again, refused again). Control: the refusal in a
 * handler without phases: not replayed.
 *
 * Suggested fix: `classifyHandlerError` recognizes the library's own `IdempotencyError`s that
 * `guard()` hands on (their `retry` kind, by class or by `cause`), or `guard()` rethrows the
 * seam's error and lets the request classify it once.
 *
 * Fixed (session of 2026-12-06, sixth): lib/transaction/failure.ts `classifyHandlerError` keeps
 * the failure it gave by the error it answers with, so the library's wrapper of a refusal
 * that `PhaseRunner.guard` hands on is classified again as what it wraps (a `retry`, never
 * 'final'); it also knows the four refusal wrappers by class (`IdempotencyCursorOpenError`,
 * `IdempotencyStatementBesidePhaseError`, `IdempotencySubscriberTransactionOpenError`,
 * `IdempotencyRunnerConnectedOutsideRequestError`), wherever they are made. Table-driven in
 * lib/transaction/failure.spec.ts over every refusal, raw, under `driverError` and as what
 * aborted a transaction, handed on once and twice.
 */
import {
  Body,
  type CanActivate,
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

@Entity({ name: 'adv98_phase_entries', synchronize: false })
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

  @Post('no-phase')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async noPhase(@Body() b: { tag: string }) {
    await this.uow.runner.manager.insert(Entry, { tag: b.tag });
    return { tag: b.tag };
  }

  @Post('phase-finish')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async phaseFinish(@Body() b: { tag: string }) {
    await this.phases.run('charge', async (m) => {
      await m.insert(Entry, { tag: `${b.tag}-charge` });
      return { ok: true };
    });
    return this.phases.finish(async () => {
      await this.uow.runner.manager.insert(Entry, { tag: b.tag });
      return { tag: b.tag };
    });
  }

  @Post('phase-caught')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async phaseCaught(@Body() b: { tag: string }) {
    await this.phases.run('charge', async (m) => {
      try {
        await this.uow.runner.query('SELECT 1');
      } catch {
        // the tenant read is optional here
      }
      await m.insert(Entry, { tag: `${b.tag}-charge` });
      return { ok: true };
    });
    return this.phases.finish(async (m) => {
      await m.insert(Entry, { tag: b.tag });
      return { tag: b.tag };
    });
  }
}

describe('adversary 98 orm: a guard-connected runner refused inside a phase', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv98_orm_refusal_in_phase', {
      controllers: [ChargeController],
      providers: [UnitOfWork, ReadingGuard],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv98_phase_entries (id serial PRIMARY KEY, tag text NOT NULL)',
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
        "SELECT tag FROM public.adv98_phase_entries WHERE tag LIKE $1 || '%' ORDER BY id",
        [tag],
      )
    ).rows.map((r) => r.tag);
    return { statuses: [statusOf(first), statusOf(again)], rows };
  }

  const refused = '500 runner_connected_outside_request';

  it('control: refused in a handler without phases: given back, not replayed', async () => {
    expect(await scenario('no-phase', 'np')).toEqual({ statuses: [refused, refused], rows: [] });
  }, 30_000);

  it('refused in finish(): given back, not replayed', async () => {
    expect(await scenario('phase-finish', 'pf')).toEqual({
      statuses: [refused, refused],
      rows: ['pf-charge'],
    });
  }, 30_000);

  it('refused inside a phase’s work: given back, not replayed', async () => {
    expect(await scenario('phase-caught', 'pc')).toEqual({
      statuses: [refused, refused],
      rows: [],
    });
  }, 30_000);
});
