/**
 * Adversary 81 (orm): one query runner, one transaction per item (a batch import), each
 * transaction handing its subscribers what it did through `queryRunner.data` (TypeORM's own
 * channel for that: "Stores temporarily user data. Useful for sharing data with subscribers"),
 * and an `afterTransactionCommit` subscriber that publishes it. Without the library each commit
 * publishes its own item: `['a', 'b']`. Under `@Idempotent()` the two events are told after the
 * request's COMMIT, both through the same runner, whose `data` is read then: the last item's,
 * twice. Item `a`'s event is lost and `b`'s published twice, on every keyed request.
 *
 *   @EventSubscriber() class Publisher implements EntitySubscriberInterface {
 *     afterTransactionCommit(e) { const item = e.queryRunner.data?.item; if (item) bus.publish(item); }
 *   }
 *   @Post() @Idempotent() async import(@Body() b: { items: string[] }) {
 *     const qr = this.dataSource.createQueryRunner(); await qr.connect();
 *     for (const item of b.items) {
 *       await qr.startTransaction();
 *       await qr.manager.save(Item, { tag: item });
 *       qr.data = { item };
 *       await qr.commitTransaction();
 *     }
 *     await qr.release();
 *   }
 *
 * Why: lib/data-layers/after-request-commit.ts `AfterRequestCommit.note(runner)` keeps the
 * runner (the view) only, and `tell` broadcasts through it after the request's COMMIT: its
 * subscribers get `event.queryRunner` = that runner as it is then, its `data` the last one set
 * (the class comment says so: "the same object, with its `data`: what that code left"). What
 * each commit's subscribers would have read at that commit is not kept.
 *
 * Docs it contradicts: docs/guides/transactions.md, "TypeORM's transaction events mean what they
 * say": `afterTransactionCommit` is told "in the order the commits were made, with
 * `event.queryRunner` the runner the transaction's code had (its `data` too)"; and the library's
 * promise that effects happen exactly once (here one event twice, one never).
 *
 * Severity: medium (an event lost and another doubled, silently, on every keyed request that
 * reuses a runner for several transactions).
 *
 * Fails now: published is `['b', 'b']` where `['a', 'b']` is expected (the control without
 * `@Idempotent()` gets `['a', 'b']`; a keyed request with one item gets `['a']`).
 *
 * Suggested fix: at `note`, snapshot what the subscribers read of the runner at that commit
 * (its `data` reference, and `transactionDepth`…), and tell each event through a view of the
 * runner that answers those (a small proxy over the runner whose `data` is the one noted).
 *
 * Fixed: lib/data-layers/after-request-commit.ts `AfterRequestCommit.note` keeps the runner's
 * `data` as it is at each nested commit, and `tell` broadcasts each event through the runner
 * itself (`event.queryRunner` stays the object the code had) with its `data` swapped to the
 * kept one for that event and put back after (`withDataAtCommit`) (the same mechanism as
 * adversary81-orm-save-data-lost).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  PrimaryGeneratedColumn,
  type TransactionCommitEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv81_data_items', synchronize: false })
class Item {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** What the publisher sent (a message bus, in the app). */
const published: string[] = [];

@EventSubscriber()
class Publisher implements EntitySubscriberInterface {
  afterTransactionCommit(event: TransactionCommitEvent) {
    const item = (event.queryRunner.data as { item?: string } | undefined)?.item;
    if (item) published.push(item);
  }
}

@Injectable()
class ImportService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async import(items: string[]) {
    const qr = this.dataSource.createQueryRunner();
    await qr.connect();
    try {
      for (const item of items) {
        await qr.startTransaction();
        await qr.manager.save(Item, { tag: item });
        qr.data = { item };
        await qr.commitTransaction();
      }
    } finally {
      await qr.release();
    }
    return { imported: items.length };
  }
}

@Controller()
class ImportController {
  constructor(private readonly imports: ImportService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { items: string[] }) {
    return this.imports.import(body.items);
  }

  @Post('plain')
  plain(@Body() body: { items: string[] }) {
    return this.imports.import(body.items);
  }
}

describe('adversary 81: TypeORM, queryRunner.data of several commits on one runner', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv81_orm_runner_data', {
      controllers: [ImportController],
      providers: [ImportService],
      entities: [Item],
      subscribers: [Publisher],
      imports: [TypeOrmModule.forFeature([Item])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv81_data_items (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const run = async (path: string, key: string | undefined, items: string[]) => {
    published.length = 0;
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const answer = await call.send({ items });
    return { status: answer.status, published: [...published] };
  };

  it('control: without @Idempotent(), each commit publishes its own item', async () => {
    expect(await run('/plain', undefined, ['a', 'b'])).toEqual({
      status: 201,
      published: ['a', 'b'],
    });
  }, 30_000);

  it('control: keyed, one item: published once', async () => {
    expect(await run('/keyed', 'one-1', ['a'])).toEqual({ status: 201, published: ['a'] });
  }, 30_000);

  it('keyed, two items on one runner: each published once', async () => {
    expect(await run('/keyed', 'two-1', ['a', 'b'])).toEqual({
      status: 201,
      published: ['a', 'b'],
    });
  }, 30_000);
});
