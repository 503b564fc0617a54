/**
 * Fixed (session of 2026-12-06 fifth): `placeOfRunner` (lib/transaction/runner-place.ts) judges
 * a plain runner made outside every scope and first used after its request ended as `after-end`;
 * `joiningWhereUsed` (lib/transaction/transaction-scope.ts) then stands it for the scope's
 * `runnerPastEnd` (lib/data-layers/lazy-transaction.ts: a runner of the DataSource's own whose
 * connect waits for the end's outcome, apart after a commit, `TransactionEndedError` after a
 * rollback), kept per scope so its `release()` reaches the same runner. No loop: the waiting
 * runner is a fresh one of the DataSource's own (`ownQueryRunner`), never the proxied runner,
 * so its connect does not re-enter the proxy.
 *
 * Not fixed (session of 2026-12-06 fourth): round 90's fixer made a runner's connect, when first
 * used after its request ended, wait for the request's outcome and throw `TransactionEndedError`
 * after a rollback; the suite then hung with the CPU busy and no output, and the change was taken
 * out before the deadline. Its lead: the connected check then also read `isReleased`, the flip
 * that caused the guard leak fixed in the same round. Route: in `placeOfRunner`
 * (lib/transaction/runner-place.ts), a runner made outside every scope whose request's scope has
 * ended is judged as a view of an ended transaction is (refused after a rollback, apart after a
 * commit), not handed back as itself.
 *
 * Adversary 90 (orm): work a handler leaves running (an audit row written a moment later from a
 * timer) through its request-scoped unit of work's runner, after the request rolled back.
 * The guide: such work "meets `TransactionEndedError` rather than committing apart from a
 * request that its retry will run again" once the request rolled back; that holds for a
 * runner made in the handler, and (by the code: `joiningWhereUsed` keeps the view it took per
 * scope) for the request-scoped runner if the handler had used it while open. But a runner made outside every scope (the `Scope.REQUEST` provider's) whose first
 * use in the request's scope comes after the end is the plain runner: `openRunner` offers no
 * view of an ended transaction, and `joiningWhereUsed` then hands the runner itself, which
 * writes and commits on its own. The failed try's (503, "rolled back, nothing stored") late row
 * is kept, and the retry writes it again: two rows for one key.
 *
 * User code:
 *
 *   @Injectable({ scope: Scope.REQUEST })
 *   class UnitOfWork {
 *     readonly runner = this.dataSource.createQueryRunner();
 *     constructor(@InjectDataSource() private readonly dataSource: DataSource) {}
 *   }
 *   @Post() @Idempotent() async pay(@Body() b) {
 *     setTimeout(() => void this.uow.runner.manager.insert(Audit, { tag: b.tag }), 150);
 *     await this.bank.confirm(b.tag);             // RetryLaterError once
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/transaction/transaction-scope.ts `joiningWhereUsed` → `elsewhere()`:
 * `store.openRunner(dataSource)` (lib/data-layers/lazy-transaction.ts `openRunner`) answers
 * undefined once `this.ended`, and the runner underneath is used as is: nothing asks whether
 * the scope's request ended (`ended-request` / `after-its-end` in `placeOfView` is never
 * reached for it), so neither the wait for the outcome nor the refusal after a rollback apply.
 *
 * Docs quote: docs/guides/transactions.md: "A statement of such work that arrives while the
 * commit is under way waits for its outcome, then runs on a connection of its own if the
 * request committed. ... If the request rolled back instead (a 503, a lost lease), it meets
 * `TransactionEndedError` rather than committing apart from a request that its retry will run
 * again"; "a runner made outside every request (a `Scope.REQUEST` unit of work ...) joins the
 * request it is used in"; the table: `RetryLaterError` "rolled back, nothing stored, lease
 * released | runs it once".
 *
 * Severity: high (an effect twice for one key: the failed try's late row committed on its own,
 * the retry's too; silent).
 *
 * Fails now (verified unskipped, twice): rows ['u1', 'u1'] (expected ['u1']), statuses
 * [503, 201].
 * Control: the same timer writing through `dataSource.manager` (a runner made in the request's
 * scope): the failed try's late write refused (`TransactionEndedError`), one row.
 *
 * Suggested fix: in `joiningWhereUsed`, a scope whose transaction has ended is the request's
 * end for that runner too: route it as work that request left running (`apart(false, …)`:
 * wait for the outcome, apart once committed, refused after a rollback), e.g. let
 * `openRunner` answer a view while ended (its `viewOf` already handles past-the-end use).
 */
import {
  Body,
  Controller,
  type INestApplication,
  Inject,
  Injectable,
  Post,
  Scope,
} from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn, type QueryRunner } from 'typeorm';
import { Idempotent, RetryLaterError } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv90_late_audit', synchronize: false })
class Audit {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

const downOnce = new Set<string>();
function confirm(tag: string) {
  if (downOnce.delete(tag)) throw new RetryLaterError('the bank is down');
}

/** The late writes, settled: what each met. */
const late: Promise<string>[] = [];
function leaveRunning(write: () => Promise<unknown>) {
  late.push(
    new Promise<string>((resolve) => {
      setTimeout(() => {
        write().then(
          () => resolve('written'),
          (error: unknown) => resolve((error as Error).name),
        );
      }, 150);
    }),
  );
}

@Injectable({ scope: Scope.REQUEST })
class UnitOfWork {
  readonly runner: QueryRunner;
  constructor(@InjectDataSource() dataSource: DataSource) {
    this.runner = dataSource.createQueryRunner();
  }
}

@Controller()
class PaymentController {
  constructor(
    @Inject(UnitOfWork) private readonly uow: UnitOfWork,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  @Post('scoped')
  @Idempotent()
  payScoped(@Body() body: { tag: string }) {
    leaveRunning(async () => {
      try {
        await this.uow.runner.manager.insert(Audit, { tag: body.tag });
      } finally {
        await this.uow.runner.release();
      }
    });
    confirm(body.tag);
    return { tag: body.tag };
  }

  @Post('made-here')
  @Idempotent()
  payMadeHere(@Body() body: { tag: string }) {
    leaveRunning(() => this.dataSource.manager.insert(Audit, { tag: body.tag }));
    confirm(body.tag);
    return { tag: body.tag };
  }
}

describe('adversary 90 orm: a request-scoped runner first used by work left running after a rollback', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv90_orm_scoped_runner_after_rollback', {
      controllers: [PaymentController],
      providers: [UnitOfWork],
      entities: [Audit],
      imports: [TypeOrmModule.forFeature([Audit])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv90_late_audit (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'scoped' | 'made-here', tag: string) {
    downOnce.add(tag);
    late.length = 0;
    const post = () =>
      request(app.getHttpServer())
        .post(`/${route}`)
        .set('Idempotency-Key', `key-${tag}`)
        .send({ tag });
    const failed = await post();
    const retried = await post();
    const met = await Promise.all(late);
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv90_late_audit WHERE tag = $1 ORDER BY id',
      [tag],
    );
    return {
      statuses: [failed.status, retried.status],
      rows: rows.map((row) => row.tag),
      met,
    };
  }

  it('control: the late write through a runner made in the scope: refused after the rollback, one row', async () => {
    expect(await scenario('made-here', 'c1')).toEqual({
      statuses: [503, 201],
      rows: ['c1'],
      met: ['TransactionEndedError', 'written'],
    });
  }, 30_000);

  it('the late write through the request-scoped runner: refused after the rollback too, one row', async () => {
    expect(await scenario('scoped', 'u1')).toEqual({
      statuses: [503, 201],
      rows: ['u1'],
      met: ['TransactionEndedError', 'written'],
    });
  }, 30_000);
});
