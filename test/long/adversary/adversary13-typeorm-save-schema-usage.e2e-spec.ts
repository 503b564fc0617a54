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
 * What a user does (TypeORM, docs/guides/data-layers.md): the app's sessions run as its own
 * role, not the database owner (here `ALTER DATABASE … SET role`, as a login role would). The
 * database also holds another team's schema, `billing`, the app's role has no USAGE on, with a
 * `DEFERRABLE INITIALLY DEFERRED` foreign key. The handler is the most ordinary TypeORM code:
 * `return this.dataSource.getRepository(Order).save({ item })`. Without the library: 201.
 *
 * What happens: a save opens its own transaction, nested in the request's; before its RELEASE
 * the library runs the deferred check and the "deferred again" DO block
 * (lib/data-layers/nested-commit.ts), which names every initially deferred constraint of the
 * database, schema-qualified: `SET CONSTRAINTS billing.…, … DEFERRED` fails with 42501
 * "permission denied for schema billing". Every save of every request fails (500), for ever.
 *
 * What should happen: 201 once, the order saved once.
 *
 * Why it matters: the same break as adversary13-deferred-again-schema-usage on the pool seam,
 * but on TypeORM it takes every `save()`: one deferred constraint in any schema the app cannot
 * use makes the app unusable under @Idempotent().
 */
@Entity({ name: 'orders', synchronize: false })
class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  item!: string;
}

@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('plain')
  plain(@Body() body: { item: string }) {
    return this.dataSource.getRepository(Order).save({ item: body.item });
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { item: string }) {
    return this.dataSource.getRepository(Order).save({ item: body.item });
  }
}

describe('adversary 13: TypeORM save with an initially deferred constraint in a schema the app role cannot use', () => {
  let typeorm: TypeormApp;
  const role = `adv13_app_${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    typeorm = await startTypeormApp('adv13_typeorm_usage', {
      entities: [Order],
      controllers: [OrdersController],
      setup: async (admin, database) => {
        await admin.query(`
          CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL);
          CREATE SCHEMA billing;
          CREATE TABLE billing.accounts (id int PRIMARY KEY);
          CREATE TABLE billing.invoices (
            id int PRIMARY KEY,
            account_id int NOT NULL REFERENCES billing.accounts DEFERRABLE INITIALLY DEFERRED);
          CREATE ROLE ${role};
          GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role};
          GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ${role};
          ALTER DATABASE ${database.name} SET role = ${role}`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await typeorm?.close();
    const root = new Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${role}`);
    await root.end();
  });

  const saved = async (item: string) =>
    (await typeorm.admin.query('SELECT 1 FROM orders WHERE item = $1', [item])).rows.length;

  it('without the library (no @Idempotent): 201 (control)', async () => {
    const answer = await request(typeorm.app.getHttpServer()).post('/plain').send({ item: 'a' });
    expect({ status: answer.status, saved: await saved('a') }).toEqual({ status: 201, saved: 1 });
  }, 20_000);

  it('under @Idempotent(): 201 once, saved once', async () => {
    const send = () =>
      request(typeorm.app.getHttpServer())
        .post('/idempotent')
        .set('Idempotency-Key', 'key-1')
        .send({ item: 'b' });
    const first = await send();
    const retry = await send();
    // Observed: { first: 500, retry: 500, saved: 0 } (42501 from the deferred-again block).
    expect({ first: first.status, retry: retry.status, saved: await saved('b') }).toEqual({
      first: 201,
      retry: 201,
      saved: 1,
    });
  }, 20_000);
});
