/**
 * Adversary 81 (orm): a query runner disposed the TypeORM 1.x way (`await using`) inside an
 * `@Idempotent()` handler. TypeORM 1.x's `QueryRunner` is `AsyncDisposable`: at the end of the
 * scope, `[Symbol.asyncDispose]()` commits a transaction still open ("ignore all savepoints and
 * commit directly") and releases the runner. Without the library the code below commits the
 * save and answers 201. Under `@Idempotent()` every such request answers 500 (the work rolled
 * back; a retry with the same key gets 500 again), refused with a message that is false for
 * this code ("commitTransaction() with no startTransaction() refused": it did start one).
 *
 *   @Post() @Idempotent() async create(@Body() b) {
 *     await using qr = this.dataSource.createQueryRunner();
 *     await qr.connect();
 *     await qr.startTransaction();
 *     await qr.manager.save(Item, { tag: b.tag });
 *     // end of scope: qr[Symbol.asyncDispose]() commits what is open, then releases
 *     return { rows: await this.dataSource.manager.count(Item, { where: { tag: b.tag } }) };
 *   }
 *
 * (The test calls `qr[Symbol.asyncDispose]()` itself: it is what `await using` calls.)
 *
 * Why: node_modules/typeorm/query-runner/BaseQueryRunner.js `[Symbol.asyncDispose]`:
 * `if (this.isTransactionActive) { this.transactionDepth = 1; await this.commitTransaction(); }`.
 * On a view (lib/data-layers/runner-view.ts `runnerView`): `isTransactionActive` answers true
 * for the code's own transaction (`viewSaysActive`, new in this round), and the `set` trap
 * writes `transactionDepth = 1` through to the request's one runner (`Reflect.set(own ??
 * target, …)`), whose depth was 2 (the code's savepoint open). The commit that follows, at
 * depth 1, is read as a commit of the request's own transaction
 * (lib/data-layers/lazy-transaction.ts: "a commit or rollback with no savepoint of its own open
 * … [is] refused") and `TransactionControlRefusedError` ends the request in a rollback; the
 * runner's depth is left wrong besides.
 *
 * Docs it contradicts: docs/guides/transactions.md: a query runner's transaction "is a
 * savepoint of the request's"; the guide's opening, "Nothing in the handler changes"; and the
 * refusal's own words ("Use … a query runner’s startTransaction() before its commit", which this
 * code did).
 *
 * Severity: medium (valid TypeORM 1.x code fails on every keyed request with a 500 and a
 * misleading error; nothing doubled or lost, the work rolls back).
 *
 * Fails now: the keyed request answers `500 Internal server error` (logged:
 * TransactionControlRefusedError "commitTransaction() with no startTransaction() refused"), no
 * row saved, where `201 { rows: 1 }` is expected (the control, the same code committing with
 * `commitTransaction()` before disposing, gets it).
 *
 * Suggested fix: give the view its own `[Symbol.asyncDispose]` (commit the view's own open
 * nested transactions, innermost first, then release), or in the `set` trap keep a view's
 * `transactionDepth` writes away from the shared runner and read a commit after `depth = 1`
 * from a view with its own transaction open as "commit all of its own savepoints".
 *
 * Fixed: lib/data-layers/runner-view.ts: a view has its own `[Symbol.asyncDispose]`
 * (`disposeOf`): it commits its code's own open transactions (each of its savepoints,
 * innermost first, through the view's `commitTransaction`) and then releases, never writing
 * `transactionDepth` to the request's runner; lib/data-layers/lazy-transaction.ts `viewOf`
 * hands it `NestedIdentity.hasUncommitted(view)`. On a view running a transaction on a runner
 * of its own (past the request's end), TypeORM's own dispose runs on that runner.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv81_using_items', synchronize: false })
class Item {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

const asyncDispose = (Symbol as unknown as { asyncDispose: symbol }).asyncDispose;

@Injectable()
class ItemService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async create(tag: string, commitFirst: boolean) {
    const qr = this.dataSource.createQueryRunner();
    await qr.connect();
    await qr.startTransaction();
    await qr.manager.save(Item, { tag });
    if (commitFirst) await qr.commitTransaction();
    // What `await using qr = …` runs at the end of its scope.
    await (qr as unknown as Record<symbol, () => Promise<void>>)[asyncDispose]!.call(qr);
    return { rows: await this.dataSource.manager.count(Item, { where: { tag } }) };
  }
}

@Controller()
class ItemController {
  constructor(private readonly items: ItemService) {}

  @Post('disposed')
  @Idempotent()
  disposed(@Body() body: { tag: string }) {
    return this.items.create(body.tag, false);
  }

  @Post('committed')
  @Idempotent()
  committed(@Body() body: { tag: string }) {
    return this.items.create(body.tag, true);
  }

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return this.items.create(body.tag, false);
  }
}

describe('adversary 81: TypeORM, a query runner disposed with `await using` in the handler', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv81_orm_await_using', {
      controllers: [ItemController],
      providers: [ItemService],
      entities: [Item],
      imports: [TypeOrmModule.forFeature([Item])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv81_using_items (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const outcome = async (path: string, key: string | undefined, tag: string) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const answer = await call.send({ tag });
    const saved = await fixture.admin.query('SELECT 1 FROM adv81_using_items WHERE tag = $1', [
      tag,
    ]);
    return { status: answer.status, body: answer.body as unknown, saved: saved.rowCount };
  };

  it('control: without @Idempotent(), the disposed runner commits the save', async () => {
    expect(await outcome('/plain', undefined, 'p1')).toEqual({
      status: 201,
      body: { rows: 1 },
      saved: 1,
    });
  }, 30_000);

  it('control: keyed, committed before the dispose: 201, saved once', async () => {
    expect(await outcome('/committed', 'c-1', 'c1')).toEqual({
      status: 201,
      body: { rows: 1 },
      saved: 1,
    });
  }, 30_000);

  it('keyed: the disposed runner commits its savepoint, 201', async () => {
    expect(await outcome('/disposed', 'd-1', 'd1')).toEqual({
      status: 201,
      body: { rows: 1 },
      saved: 1,
    });
  }, 30_000);
});
