/**
 * Adversary 81 (orm): `repository.save(entity, { data })`, TypeORM's documented way to hand a
 * save's subscribers what they need ("data: Additional data to be passed with persist method.
 * This data can be used in subscribers then"), read by an `afterTransactionCommit` publisher
 * (who did it, for an audit or an event). Without the library the save's own transaction commits
 * and its subscribers read `event.queryRunner.data` = that `data`. Under `@Idempotent()` they
 * are told after the request's COMMIT, by which time TypeORM has put the runner's old `data`
 * back: the publisher reads `{}`, and publishes nothing (or an event without its actor), on every
 * keyed request.
 *
 *   @EventSubscriber() class Publisher implements EntitySubscriberInterface {
 *     afterTransactionCommit(e) { const by = e.queryRunner.data?.by; if (by) bus.publish({ by }); }
 *   }
 *   @Post() @Idempotent() create(@Body() b, @Req() req) {
 *     return this.orders.save({ tag: b.tag }, { data: { by: req.user.id } });
 *   }
 *
 * Why: node_modules/typeorm/persistence/EntityPersistExecutor.js sets `queryRunner.data =
 * options.data` for the save, commits its own transaction, and in its `finally` puts the old
 * `data` back (`queryRunner.data = oldQueryRunnerData`). lib/data-layers/after-request-commit.ts
 * `AfterRequestCommit.note(runner)` keeps only the runner (the view), and `tell` broadcasts
 * through it after the request's COMMIT, when its `data` is the old one again.
 *
 * Docs it contradicts: docs/guides/transactions.md, "TypeORM's transaction events mean what they
 * say": `afterTransactionCommit` is told "with `event.queryRunner` the runner the transaction's
 * code had (its `data` too)"; the guide's opening, "Nothing in the handler changes".
 *
 * Severity: medium (what the subscriber was handed is lost on every keyed save that passes
 * `data`: an event published without its actor, or not at all; silent: 201 answered and replayed).
 *
 * Fails now: published is `[]` where `['u1']` is expected (the control without `@Idempotent()`
 * gets `['u1']`; a keyed save through a query runner whose `data` the code set and left gets it).
 *
 * Suggested fix: at `note`, keep the runner's `data` as it is at that commit (TypeORM's commit
 * would hand that one), and tell the event through a view of the runner whose `data` is the one
 * kept.
 *
 * Fixed: lib/data-layers/after-request-commit.ts `AfterRequestCommit.note` keeps the runner's
 * `data` as it is at each nested commit, and `tell` broadcasts each event through the runner
 * itself (`event.queryRunner` stays the object the code had) with its `data` swapped to the
 * kept one for that event and put back after (`withDataAtCommit`).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource, InjectRepository, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import {
  Column,
  DataSource,
  Entity,
  type EntitySubscriberInterface,
  EventSubscriber,
  PrimaryGeneratedColumn,
  Repository,
  type TransactionCommitEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

@Entity({ name: 'adv81_save_data_orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;
}

/** Who the publisher sent events for (a message bus, in the app). */
const published: string[] = [];

@EventSubscriber()
class Publisher implements EntitySubscriberInterface {
  afterTransactionCommit(event: TransactionCommitEvent) {
    const by = (event.queryRunner.data as { by?: string } | undefined)?.by;
    if (by) published.push(by);
  }
}

@Injectable()
class OrderService {
  constructor(
    @InjectRepository(Order) private readonly orders: Repository<Order>,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  async withSaveData(tag: string, by: string) {
    const order = await this.orders.save({ tag }, { data: { by } });
    return { id: order.id };
  }

  async withRunnerData(tag: string, by: string) {
    const qr = this.dataSource.createQueryRunner();
    qr.data = { by };
    try {
      const order = await qr.manager.save(Order, { tag });
      return { id: order.id };
    } finally {
      await qr.release();
    }
  }
}

@Controller()
class OrderController {
  constructor(private readonly orders: OrderService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { tag: string; by: string }) {
    return this.orders.withSaveData(body.tag, body.by);
  }

  @Post('runner')
  @Idempotent()
  runner(@Body() body: { tag: string; by: string }) {
    return this.orders.withRunnerData(body.tag, body.by);
  }

  @Post('plain')
  plain(@Body() body: { tag: string; by: string }) {
    return this.orders.withSaveData(body.tag, body.by);
  }
}

describe("adversary 81: TypeORM, a save's { data } read by afterTransactionCommit", () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv81_orm_save_data', {
      controllers: [OrderController],
      providers: [OrderService],
      entities: [Order],
      subscribers: [Publisher],
      imports: [TypeOrmModule.forFeature([Order])],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv81_save_data_orders (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const run = async (path: string, key: string | undefined, tag: string, by: string) => {
    published.length = 0;
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const answer = await call.send({ tag, by });
    return { status: answer.status, published: [...published] };
  };

  it('control: without @Idempotent(), the subscriber reads the save’s data', async () => {
    expect(await run('/plain', undefined, 'p1', 'u1')).toEqual({
      status: 201,
      published: ['u1'],
    });
  }, 30_000);

  it('control: keyed, data set on the query runner and left: read', async () => {
    expect(await run('/runner', 'r-1', 'r1', 'u1')).toEqual({ status: 201, published: ['u1'] });
  }, 30_000);

  it('keyed: the subscriber reads the save’s data', async () => {
    expect(await run('/keyed', 'k-1', 'k1', 'u1')).toEqual({ status: 201, published: ['u1'] });
  }, 30_000);
});
