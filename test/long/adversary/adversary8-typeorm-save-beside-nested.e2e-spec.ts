import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { AfterInsert, Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 8: a `save()` beside an open `dataSource.transaction()` (two branches of a
 * handler under `Promise.all`: one writes a batch in a nested transaction, the other saves an
 * order through an injected repository and catches its failure). The save asks the runner
 * whether a transaction is open; a nested transaction of the code's is, so the save opens no
 * savepoint of its own, and its INSERT runs inside the other branch's savepoint. Its
 * `@AfterInsert` listener throws: the save rejects, the handler answers 201 `{ second:
 * 'failed: …' }`, and the nested transaction then commits (RELEASE SAVEPOINT), keeping the
 * failed save's row. Round 6/7's `ConcurrentSaveFailedError` covers a save beside another save
 * only (`besideSave` requires `!outermostKept`).
 * Without the library: the save has its own connection and transaction, rolled back: only
 * the nested batch's row is kept. Expected with it: the same, or a clear refusal (500,
 * nothing kept); never 201 with the row of a save the handler was told had failed.
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;

  /** The search index's sync: fails for this order. */
  @AfterInsert()
  index() {
    if (this.tag.endsWith('-unindexable')) throw new Error('the search index refused the order');
  }
}

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async place(tag: string) {
    const repository = this.dataSource.getRepository(Order);
    let batchStarted!: () => void;
    const started = new Promise<void>((resolve) => (batchStarted = resolve));
    const [, single] = await Promise.all([
      // The batch: its rows all or nothing.
      this.dataSource.transaction(async (manager) => {
        await manager.insert(Order, { tag: `${tag}-batch` });
        batchStarted();
        await sleep(150); // more of the batch's work
      }),
      // An independent order, placed meanwhile; its failure is reported, not fatal.
      (async () => {
        await started; // (for a deterministic test: the batch is under way)
        try {
          await repository.save(repository.create({ tag: `${tag}-unindexable` }));
          return 'placed';
        } catch (error) {
          return `failed: ${(error as Error).message}`;
        }
      })(),
    ]);
    return { single };
  }

  @Post('orders')
  @Idempotent()
  idempotent(@Body() body: { tag: string }) {
    return this.place(body.tag);
  }

  @Post('plain/orders')
  plain(@Body() body: { tag: string }) {
    return this.place(body.tag);
  }
}

describe('adversary 8: TypeORM, a save that fails beside an open nested transaction', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv8_save_beside_nested', {
      controllers: [OrdersController],
      entities: [Order],
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, tag text NOT NULL)');
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const kept = async (tag: string) =>
    (
      await admin.query<{ tag: string }>('SELECT tag FROM orders WHERE tag LIKE $1 ORDER BY tag', [
        `${tag}-%`,
      ])
    ).rows.map((row) => row.tag);

  const post = async (path: string, tag: string, key?: string) => {
    const req = request(app.getHttpServer()).post(path).timeout(6_000);
    const response = await (key ? req.set('Idempotency-Key', key) : req).send({ tag });
    return { status: response.status, kept: await kept(tag) };
  };

  it('without the library: 201, the batch kept, the failed save not (the control)', async () => {
    expect(await post('/plain/orders', 'p')).toEqual({ status: 201, kept: ['p-batch'] });
  });

  it('with it: as without, or a clear 500 with nothing kept', async () => {
    const outcome = await post('/orders', 'i', 'orders-i');
    // Observed: { status: 201, kept: ['i-batch', 'i-unindexable'] }.
    expect([
      { status: 201, kept: ['i-batch'] },
      { status: 500, kept: [] },
    ]).toContainEqual(outcome);
  });
});
