import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { AfterInsert, Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 5: TypeORM's `save()` is all or nothing on its own: EntityPersistExecutor
 * opens a transaction of its own when its runner has none (`!queryRunner.isTransactionActive`)
 * and rolls it back when anything in it throws, an entity listener or subscriber included
 * (`@AfterInsert` syncing a search index, an audit that fails). The request's runner, and now
 * each view of it, says `isTransactionActive = true` from the start, so `save()` opens no
 * savepoint: when its listener throws after the INSERTs, nothing rolls them back. No statement
 * failed, so the request's transaction is not aborted: a handler that catches the save's
 * error and answers (a 201 `{ saved: false }`) commits the rows the save said it did not
 * write. Without the library the save's own transaction rolled them back.
 */
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

  @Post('orders')
  @Idempotent()
  idempotent(@Body() body: { tag: string }) {
    return this.place(body.tag);
  }

  @Post('plain/orders')
  plain(@Body() body: { tag: string }) {
    return this.place(body.tag);
  }

  /**
   * Two saves at once (`Promise.all`), neither failing: the first opens its own transaction
   * (a savepoint), the second, asking while that one is being started, opens none (as inside
   * a transaction); both kept, as before saves opened their own.
   */
  @Post('orders/parallel')
  @Idempotent()
  async parallel(@Body() body: { tag: string }) {
    const repository = this.dataSource.getRepository(Order);
    await Promise.all([
      repository.save(repository.create({ tag: `${body.tag}-first` })),
      repository.save(repository.create({ tag: `${body.tag}-second` })),
    ]);
    return { tag: body.tag, saved: true };
  }

  /** Two orders saved at once; if the save fails, the client is told nothing was placed. */
  private async place(tag: string) {
    try {
      const repository = this.dataSource.getRepository(Order);
      await repository.save(
        repository.create([{ tag: `${tag}-first` }, { tag: `${tag}-unindexable` }]),
      );
      return { tag, saved: true };
    } catch {
      return { tag, saved: false };
    }
  }
}

describe('adversary 5: TypeORM save() whose listener throws', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv5_typeorm_save', {
      controllers: [OrdersController],
      entities: [Order],
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, tag text NOT NULL)');
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const orders = async (tag: string) =>
    Number(
      (await admin.query('SELECT count(*) FROM orders WHERE tag LIKE $1', [`${tag}-%`])).rows[0]
        .count,
    );

  it('without the library: { saved: false }, no order kept (the control)', async () => {
    const response = await request(app.getHttpServer()).post('/plain/orders').send({ tag: 'p' });
    expect({
      status: response.status,
      body: response.body as unknown,
      kept: await orders('p'),
    }).toEqual({
      status: 201,
      body: { tag: 'p', saved: false },
      kept: 0,
    });
  });

  it('with it: { saved: false } stored, and no order kept', async () => {
    const response = await request(app.getHttpServer())
      .post('/orders')
      .set('Idempotency-Key', 'orders-1')
      .send({ tag: 'i' });
    expect({
      status: response.status,
      body: response.body as unknown,
      kept: await orders('i'),
    }).toEqual({
      status: 201,
      body: { tag: 'i', saved: false },
      kept: 0,
    });
  });

  it('two saves at once, neither failing: both kept (their savepoints never collide)', async () => {
    const response = await request(app.getHttpServer())
      .post('/orders/parallel')
      .set('Idempotency-Key', 'orders-parallel')
      .send({ tag: 'par' });
    expect({ status: response.status, kept: await orders('par') }).toEqual({
      status: 201,
      kept: 2,
    });
  });
});
