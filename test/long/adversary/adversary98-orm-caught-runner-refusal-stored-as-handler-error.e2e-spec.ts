/**
 * Adversary 98 (orm): a handler catches the refusal of a guard-connected runner's statement
 * (`RunnerConnectedOutsideRequestError`) and answers its own HttpException (409): the 409 is
 * stored as the key's answer and replayed, so the key is spent on an answer the library itself
 * caused, and a retry after the app is fixed never runs the work.
 *
 * User code:
 *
 *   @Injectable({ scope: Scope.REQUEST })
 *   class UnitOfWork { readonly runner = this.dataSource.createQueryRunner(); ... }
 *   @Injectable() class ReadingGuard { async canActivate() {
 *     await this.uow.runner.query('SELECT 1'); return true; } }   // e.g. reads the tenant
 *   @Post() @Idempotent() @UseGuards(ReadingGuard) async record(@Body() b) {
 *     try { await this.uow.runner.manager.insert(Entry, { tag: b.tag }); }
 *     catch { throw new ConflictException('could not record'); }  // a service's usual wrap
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/transaction/transaction-scope.ts `refusingStatements` → `store.refuseRunner`
 * (lib/data-layers/lazy-transaction.ts) → `RequestTransaction.refuse` sets `refused`; the
 * handler's 409 is then a stored handler error: lib/transaction/commit-answer.ts
 * `withoutEffects` → `undoEffects` sets `effectsUndone`, and `commitNow` skips the refusal
 * (`if (this.refused && !this.effectsUndone) return this.refusedEnd()`): the 409 commits as the
 * key's answer.
 *
 * Docs quote (docs/guides/transactions.md): "every statement it sends in the request ... is
 * refused with `RunnerConnectedOutsideRequestError`: the request rolls back and answers 500
 * `runner_connected_outside_request`, nothing stored"; its error class: "A retry meets the same
 * refusal until the code changes, so this is a 500, not a 503."
 *
 * Severity: medium (a wrong stored answer: the 409 replayed for good, though the library's own
 * refusal caused it and promised nothing stored; no effect written).
 *
 * Fails now (verified unskipped): statuses ['409', '409 replayed'], expected
 * ['500 runner_connected_outside_request', '500 runner_connected_outside_request'] (nothing
 * stored). The same with the refusal caught and rethrown as a plain `Error` (a service wrapping
 * its data layer's errors): ['500', '500 replayed'], a bare 500 without its code, stored, and
 * replayed after the app is fixed. Control: the handler that catches and answers 201 gets the 500 and nothing stored.
 *
 * Suggested fix: a transaction refused by the seam (`refused` set by `refuseRunner`, as by any
 * seam refusal) answers its refusal whatever the handler made of it, never storing the
 * handler's error in its place: check `refused` before `undoEffects`/`withoutEffects` stores a
 * handler error (or in `commitNow` regardless of `effectsUndone` for a seam refusal); or say in
 * the guide that a caught refusal turned into an HttpException is stored.
 *
 * Fixed (session of 2026-12-06, sixth): a transaction the seam refused with a refusal that is
 * never stored (`refusalAnswer` in lib/transaction/failure.ts: a runner connected outside the
 * request, an open cursor, a statement beside a phase, a subscriber's transaction; the
 * transaction's `refusal`) answers that refusal whatever the handler threw after:
 * lib/transaction/handler-failure.ts `onHandlerError` takes it in place of the handler's
 * error (rolled back, key released, 500 with the refusal's code), and
 * lib/transaction/commit-answer.ts `withoutEffects` throws the refusal rather than store a
 * handler's error (or a too-large body) over it, so `commitAnswer` and a detached run's late
 * answer (GraphQL fields, jobs, tasks too) roll back, give the key back and answer the refusal. Refusals of its code's own COMMIT,
 * session settings or advisory locks keep the handler's answer, as before. Added: the same
 * rule for a write beside a running phase, caught, then the handler's 409 (500
 * `statement_beside_phase`, nothing stored; the retry resumes after the phase).
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
import { InjectDataSource, InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  PrimaryGeneratedColumn,
  type QueryRunner,
  type Repository,
} from 'typeorm';
import { Idempotent, PhaseRunner } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv98_caught_entries', synchronize: false })
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
class LedgerController {
  constructor(
    @Inject(UnitOfWork) private readonly uow: UnitOfWork,
    @InjectRepository(Entry) private readonly entries: Repository<Entry>,
    private readonly phases: PhaseRunner,
  ) {}

  /**
   * The same rule for another refusal that is never stored: a write of the request's own sent
   * beside a running phase (`statement_beside_phase`), caught, then the handler's own 409.
   */
  @Post('beside-phase-409')
  @Idempotent()
  async besidePhase409(@Body() body: { tag: string }) {
    let refused = false;
    await Promise.all([
      this.phases.run('record', async (m) => {
        await new Promise((resolve) => setTimeout(resolve, 300));
        await m.insert(Entry, { tag: `${body.tag}-phase` });
        return { ok: true };
      }),
      (async () => {
        await new Promise((resolve) => setTimeout(resolve, 50));
        try {
          await this.entries.insert({ tag: `${body.tag}-beside` });
        } catch {
          refused = true;
        }
      })(),
    ]);
    if (refused) throw new ConflictException('could not record');
    return { tag: body.tag };
  }

  @Post('caught-201')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async caught201(@Body() body: { tag: string }) {
    try {
      await this.uow.runner.manager.insert(Entry, { tag: body.tag });
    } catch {
      await this.entries.insert({ tag: body.tag });
    }
    return { tag: body.tag };
  }

  @Post('caught-error')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async caughtError(@Body() body: { tag: string }) {
    try {
      await this.uow.runner.manager.insert(Entry, { tag: body.tag });
    } catch (error) {
      throw new Error(`could not record: ${(error as Error).name}`);
    }
    return { tag: body.tag };
  }

  @Post('caught-409')
  @Idempotent()
  @UseGuards(ReadingGuard)
  async caught409(@Body() body: { tag: string }) {
    try {
      await this.uow.runner.manager.insert(Entry, { tag: body.tag });
    } catch {
      throw new ConflictException('could not record');
    }
    return { tag: body.tag };
  }
}

describe('adversary 98 orm: a caught refusal of a guard-connected runner, answered as the handler’s own error', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv98_orm_caught_refusal', {
      controllers: [LedgerController],
      providers: [UnitOfWork, ReadingGuard],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE public.adv98_caught_entries (id serial PRIMARY KEY, tag text NOT NULL)',
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
        "SELECT tag FROM public.adv98_caught_entries WHERE tag = $1 OR tag LIKE $1 || '-%' ORDER BY id",
        [tag],
      )
    ).rows.map((r) => r.tag);
    return { statuses: [statusOf(first), statusOf(again)], rows };
  }

  const refused = '500 runner_connected_outside_request';

  it('control: caught, then written through the request’s repository and answered 201: 500, nothing written or stored', async () => {
    expect(await scenario('caught-201', 'a1')).toEqual({ statuses: [refused, refused], rows: [] });
  }, 30_000);

  it('caught, then answered 409: still the refusal, nothing stored', async () => {
    expect(await scenario('caught-409', 'b1')).toEqual({ statuses: [refused, refused], rows: [] });
  }, 30_000);

  it('the same rule for a write beside a phase, caught, then answered 409: 500 statement_beside_phase, nothing stored; the retry resumes after the phase', async () => {
    expect(await scenario('beside-phase-409', 'p1')).toEqual({
      statuses: ['500 statement_beside_phase', '201'],
      // The phase committed once, on the first try; the write refused beside it, on the retry
      // (the phase then done, nothing runs beside it).
      rows: ['p1-phase', 'p1-beside'],
    });
  }, 30_000);

  it('caught, then rethrown as a plain Error: still the refusal, nothing stored', async () => {
    expect(await scenario('caught-error', 'e1')).toEqual({
      statuses: [refused, refused],
      rows: [],
    });
  }, 30_000);
});
