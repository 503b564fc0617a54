import { randomBytes } from 'node:crypto';
import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { Column, DataSource, Entity, PrimaryGeneratedColumn } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { adminUrl } from '../../support/database.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * What a user does (TypeORM, docs/guides/data-layers.md; row-level security by
 * `SET LOCAL ROLE`): the handler saves the order, then runs a best-effort step in its own
 * `dataSource.transaction` (its failure caught and logged): the order's item goes into a
 * staging table (`CREATE TEMP TABLE staging … ON COMMIT DROP`, made by the login role), and a
 * count is read under the tenant's role (`SET LOCAL ROLE tenant`). Without the library: 201,
 * the order kept, the step's COMMIT drops the table whatever the current role.
 *
 * What happens: the nested COMMIT's put-back (lazy-transaction.ts afterRelease, since
 * f37a73d/b6fe19f: the temporary tables before the role) drops `staging` as `tenant`: 42501
 * "must be owner of table staging", after the RELEASE, so the request's own transaction is
 * aborted. The library's statement's error reaches the handler as its step's error (TypeORM's
 * rollback meets "transaction is not started", b6fe19f); the handler goes on as coded, and the
 * request answers 500 transaction_aborted, the order not kept, on every retry.
 *
 * What should happen: 201 once, the order kept once, as without the library.
 *
 * Why it matters: the TypeORM side of adversary13-temp-table-before-set-role: the put-back
 * order turns the nested COMMIT of ordinary code into a failure of the whole request that no
 * catch can contain.
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  item!: string;
}

const tenant = `adv13_tenant_${randomBytes(4).toString('hex')}`;
const seen: unknown[] = [];

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async run(item: string) {
    const order = await this.dataSource.getRepository(Order).save({ item });
    try {
      await this.dataSource.transaction(async (manager) => {
        await manager.query('CREATE TEMP TABLE staging (item text) ON COMMIT DROP');
        await manager.query('INSERT INTO staging VALUES ($1)', [item]);
        await manager.query(`SET LOCAL ROLE ${tenant}`);
        await manager.query('SELECT count(*) FROM orders');
      });
    } catch (error) {
      seen.push(error);
    }
    return { id: order.id, item };
  }

  @Post('plain')
  plain(@Body() body: { item: string }) {
    return this.run(body.item);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { item: string }) {
    return this.run(body.item);
  }
}

describe('adversary 13: TypeORM, a temporary table made before SET LOCAL ROLE is ended under the role', () => {
  let typeorm: TypeormApp;

  beforeAll(async () => {
    typeorm = await startTypeormApp('adv13_typeorm_ending_caught', {
      entities: [Order],
      controllers: [OrdersController],
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL);
          CREATE ROLE ${tenant} NOLOGIN;
          GRANT SELECT ON orders TO ${tenant}`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await typeorm?.close();
    const root = new Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${tenant}`);
    await root.end();
  });

  const kept = async (item: string) =>
    (await typeorm.admin.query('SELECT 1 FROM orders WHERE item = $1', [item])).rows.length;

  it('without the library: 201 (control)', async () => {
    const answer = await request(typeorm.app.getHttpServer()).post('/plain').send({ item: 'a' });
    expect({ status: answer.status, kept: await kept('a') }).toEqual({ status: 201, kept: 1 });
  }, 20_000);

  it('under @Idempotent(): 201 once, kept once', async () => {
    const send = () =>
      request(typeorm.app.getHttpServer())
        .post('/idempotent')
        .set('Idempotency-Key', 'key-1')
        .send({ item: 'b' });
    const first = await send();
    const retry = await send();
    // Observed: 500 transaction_aborted both times, kept 0; seen: 'must be owner of table staging'.
    expect({ first: first.status, retry: retry.status, kept: await kept('b') }).toEqual({
      first: 201,
      retry: 201,
      kept: 1,
    });
  }, 20_000);
});
