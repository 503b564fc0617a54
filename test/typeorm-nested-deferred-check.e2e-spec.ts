import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../lib/index.js';
import { startTypeormApp, type TypeormApp } from './support/typeorm-app.js';

/**
 * A constraint deferred to the commit (`DEFERRABLE INITIALLY DEFERRED`) that a nested
 * transaction violates fails that transaction's commit, where its code catches it, on TypeORM
 * as on the pool seam (adversary round 10 found it on Drizzle): a savepoint's RELEASE checks
 * nothing, so the violation met the request's COMMIT instead, where the handler could not
 * (500 on every try, the rejection it meant to record never kept).
 */
@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async order(body: { id: string; product: number }) {
    try {
      await this.dataSource.transaction(async (manager) => {
        await manager.query('INSERT INTO lines (order_id, product) VALUES ($1, $2)', [
          body.id,
          body.product,
        ]);
      });
      return { id: body.id, state: 'placed' };
    } catch {
      await this.dataSource.query('INSERT INTO rejections (order_id) VALUES ($1)', [body.id]);
      return { id: body.id, state: 'rejected' };
    }
  }

  @Post('orders')
  @Idempotent()
  idempotent(@Body() body: { id: string; product: number }) {
    return this.order(body);
  }

  @Post('plain/orders')
  plain(@Body() body: { id: string; product: number }) {
    return this.order(body);
  }
}

describe('TypeORM: a deferred constraint a nested transaction violates fails its commit', () => {
  let fixture: TypeormApp;

  beforeAll(async () => {
    fixture = await startTypeormApp('typeorm_nested_deferred', {
      controllers: [OrdersController],
      setup: async (admin) => {
        await admin.query('CREATE TABLE products (id int PRIMARY KEY)');
        await admin.query('INSERT INTO products VALUES (1)');
        await admin.query(
          `CREATE TABLE lines (order_id text NOT NULL,
             product int REFERENCES products DEFERRABLE INITIALLY DEFERRED)`,
        );
        await admin.query('CREATE TABLE rejections (order_id text NOT NULL)');
      },
    });
  });

  afterAll(() => fixture?.close());

  const count = async (table: string, id: string) =>
    Number(
      (await fixture.admin.query(`SELECT count(*) AS n FROM ${table} WHERE order_id = $1`, [id]))
        .rows[0].n,
    );

  it.each([
    ['an unknown product: rejected, recorded once', 'bad', 9, 'rejected', [0, 1]],
    ['a known one: placed', 'good', 1, 'placed', [1, 0]],
  ])('%s', async (_name, id, product, state, [lines, rejections]) => {
    const plain = await request(fixture.app.getHttpServer())
      .post('/plain/orders')
      .send({ id: `plain-${id}`, product });
    expect(plain.body).toEqual({ id: `plain-${id}`, state });
    for (let attempt = 0; attempt < 2; attempt++) {
      const keyed = await request(fixture.app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', `order-${id}`)
        .send({ id, product });
      expect({ status: keyed.status, body: keyed.body }).toEqual({
        status: 201,
        body: { id, state },
      });
    }
    expect([await count('lines', id), await count('rejections', id)]).toEqual([lines, rejections]);
  });
});
