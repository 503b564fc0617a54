/**
 * Adversary 88 (orm): the request-scoped unit of work, a common Nest + TypeORM shape: a
 * provider with `scope: Scope.REQUEST` that makes the request's query runner in its
 * constructor, and services that write through its manager. Nest builds request-scoped
 * providers when the request arrives, before any interceptor runs, so the runner is made
 * before `@Idempotent()` opens the request's transaction scope: it is a plain runner of the
 * DataSource, and every write through it commits on its own, at once. A try that then fails
 * in a way the library gives the key back for (`RetryLaterError`: 503, "rolled back, nothing
 * stored") keeps its row, and the client's retry writes it again: two rows for one key. No
 * warning is logged.
 *
 * User code:
 *
 *   @Injectable({ scope: Scope.REQUEST })
 *   class UnitOfWork {
 *     readonly runner = this.dataSource.createQueryRunner();
 *     constructor(@InjectDataSource() private readonly dataSource: DataSource) {}
 *     get manager() { return this.runner.manager; }
 *   }
 *   @Post() @Idempotent() async record(@Body() b) {
 *     await this.uow.manager.insert(Entry, { tag: b.tag });
 *     await this.bank.confirm(b.tag);            // RetryLaterError once
 *     return { tag: b.tag };
 *   }
 *
 * Code path: lib/transaction/transaction-scope.ts `joinTransactionsOf`'s
 * `joiningCreateQueryRunner`: `transactionScope.getStore()` is empty when Nest's injector
 * builds the request-scoped provider (the scope is entered later, in the interceptor:
 * lib/idempotency.interceptor.ts → lib/http/run-owned.ts), so `own.call(this, mode)` hands a plain runner; its
 * statements later, inside the scope, never meet the request's transaction, and nothing
 * notices a runner of the joined DataSource used inside a request's scope.
 *
 * Docs quote: docs/guides/transactions.md: "every query runner the app's DataSource creates
 * inside it is the request's ... Writes that cannot join are those that do not go through this
 * DataSource: another DataSource, a raw `pg` pool, or work handed to a queue"; the table:
 * `RetryLaterError` "rolled back, nothing stored, lease released | runs it once";
 * data-layers.md: "The request a statement belongs to is the one in whose async context it is
 * sent".
 *
 * Severity: high (an effect twice for one key: the failed try's row committed on its own, the
 * retry's with the answer; silent).
 *
 * Fails now (verified unskipped): rows ['u1', 'u1'] (expected ['u1']), statuses 503 then 201.
 * Control: the same unit of work making its runner on first use (inside the handler): ['c1'].
 *
 * Suggested fix: a statement sent inside a request's scope through a runner of the joined
 * DataSource made outside any scope joins the request (route it as `joinedRunner` would), or
 * is refused/logged clearly; or enter the transaction scope before Nest resolves
 * request-scoped providers (a middleware), so their runners are the request's; the guide
 * should say which.
 *
 * Fixed (session of 2026-12-06, third): a runner the DataSource makes outside every transaction
 * scope is handed out as one that stands, from its first use inside an open transaction's scope
 * of the same DataSource, for a view of that transaction's runner (one per scope;
 * `JoinableTransaction.openRunner`), unless it has a transaction of its own open; its manager
 * runs on it. Outside any scope it is the runner it always was. lib/transaction/transaction-
 * scope.ts `joiningWhereUsed`. docs/guides/transactions.md says a runner joins where it is used,
 * not where it was made.
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

@Entity({ name: 'adv88_uow_entries', synchronize: false })
class Entry {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** The bank's confirmation: down once for each tag listed. */
const downOnce = new Set<string>();
function confirm(tag: string) {
  if (downOnce.delete(tag)) throw new RetryLaterError('the bank is down');
}

/** The runner made with the provider, as request-scoped units of work do. */
@Injectable({ scope: Scope.REQUEST })
class EagerUnitOfWork {
  readonly runner: QueryRunner;
  constructor(@InjectDataSource() dataSource: DataSource) {
    this.runner = dataSource.createQueryRunner();
  }

  get manager() {
    return this.runner.manager;
  }
}

/** The same, its runner made on first use. */
@Injectable({ scope: Scope.REQUEST })
class LazyUnitOfWork {
  private runner?: QueryRunner;
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  get manager() {
    this.runner ??= this.dataSource.createQueryRunner();
    return this.runner.manager;
  }
}

@Controller()
class LedgerController {
  constructor(
    @Inject(EagerUnitOfWork) private readonly eager: EagerUnitOfWork,
    @Inject(LazyUnitOfWork) private readonly lazy: LazyUnitOfWork,
  ) {}

  @Post('eager')
  @Idempotent()
  async recordEager(@Body() body: { tag: string }) {
    await this.eager.manager.insert(Entry, { tag: body.tag });
    confirm(body.tag);
    return { tag: body.tag };
  }

  @Post('lazy')
  @Idempotent()
  async recordLazy(@Body() body: { tag: string }) {
    await this.lazy.manager.insert(Entry, { tag: body.tag });
    confirm(body.tag);
    return { tag: body.tag };
  }
}

describe('adversary 88 orm: a request-scoped unit of work makes its runner before the scope', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv88_orm_request_scoped_uow', {
      controllers: [LedgerController],
      providers: [EagerUnitOfWork, LazyUnitOfWork],
      entities: [Entry],
      imports: [TypeOrmModule.forFeature([Entry])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv88_uow_entries (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'eager' | 'lazy', tag: string) {
    downOnce.add(tag);
    const post = () =>
      request(app.getHttpServer()).post(`/${route}`).set('Idempotency-Key', `key-${tag}`).send({
        tag,
      });
    const failed = await post();
    const retried = await post();
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv88_uow_entries WHERE tag = $1 ORDER BY id',
      [tag],
    );
    return { statuses: [failed.status, retried.status], rows: rows.map((row) => row.tag) };
  }

  it('control: the unit of work makes its runner on first use: the failed try’s row rolled back, one row', async () => {
    expect(await scenario('lazy', 'c1')).toEqual({ statuses: [503, 201], rows: ['c1'] });
  }, 30_000);

  it('the runner made with the request-scoped provider: the failed try’s row rolled back too, one row', async () => {
    expect(await scenario('eager', 'u1')).toEqual({ statuses: [503, 201], rows: ['u1'] });
  }, 30_000);
});
