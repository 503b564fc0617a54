import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/**
 * A setting set for the transaction inside a nested one (`SET LOCAL statement_timeout` for one
 * bounded step, `set_config('app.tenant', …, true)` for row-level security) ends with it, on
 * TypeORM as on the pool seam (adversary round 9 found the leak on Drizzle): without the
 * library the nested transaction's COMMIT ends it; in the request it is a savepoint, whose
 * RELEASE keeps it, so a slower statement after it was cancelled (57014, 503 on every try) and
 * the tenant stayed set. Now what such a statement set is read just before it and put back at
 * the outermost nested transaction's COMMIT; a rollback ends it by itself.
 */
@Controller()
class StepsController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async run(tag: string, end: 'commit' | 'rollback') {
    const before = (await this.dataSource.query(
      `SELECT current_setting('statement_timeout') AS timeout`,
    )) as { timeout: string }[];
    await this.dataSource
      .transaction(async (manager) => {
        await manager.query(`SET LOCAL statement_timeout = '300ms'`);
        await manager.query(`SELECT set_config('app.tenant', $1, true)`, [tag]);
        // Its name and is_local parameters, as a template of Prisma's or Drizzle's sends them.
        await manager.query(`SELECT set_config($2, $1, $3)`, [tag, 'app.region', true]);
        await manager.query('INSERT INTO steps (tag) VALUES ($1)', [tag]);
        if (end === 'rollback') throw new Error('rolled back on purpose');
      })
      .catch(() => undefined);
    // Slower than the nested step's bound: it must run under the request's own.
    await this.dataSource.query('SELECT pg_sleep(0.6)');
    const [after] = (await this.dataSource.query(
      `SELECT current_setting('statement_timeout') AS timeout,
              coalesce(current_setting('app.tenant', true), '') AS tenant,
              coalesce(current_setting('app.region', true), '') AS region`,
    )) as { timeout: string; tenant: string; region: string }[];
    await this.dataSource.query('INSERT INTO steps (tag) VALUES ($1)', [`${tag}-after`]);
    return { before: before[0].timeout, ...after };
  }

  @Post('steps')
  @Idempotent()
  idempotent(@Body() body: { tag: string; end: 'commit' | 'rollback' }) {
    return this.run(body.tag, body.end);
  }

  @Post('plain/steps')
  plain(@Body() body: { tag: string; end: 'commit' | 'rollback' }) {
    return this.run(body.tag, body.end);
  }
}

describe('TypeORM: a SET LOCAL in a nested transaction ends with it', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('typeorm_nested_set_local');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE steps (id serial PRIMARY KEY, tag text NOT NULL)');

    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: false,
          extra: { max: 4 },
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
      ],
      controllers: [StepsController],
    })
    class StepsModule {}
    app = await bootstrapTestApp(StepsModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await admin?.end();
    await database?.drop();
  });

  const tags = async (tag: string) =>
    (
      await admin.query<{ tag: string }>('SELECT tag FROM steps WHERE tag LIKE $1 ORDER BY tag', [
        `${tag}%`,
      ])
    ).rows.map((row) => row.tag);

  it.each([
    ['committed', 'commit', ['c', 'c-after']],
    ['rolled back', 'rollback', ['r-after']],
  ] as const)('the nested transaction %s: the settings as before it', async (_name, end, kept) => {
    const tag = end === 'commit' ? 'c' : 'r';
    const plain = await request(app.getHttpServer())
      .post('/plain/steps')
      .send({ tag: `plain-${tag}`, end });
    const keyed = await request(app.getHttpServer())
      .post('/steps')
      .set('Idempotency-Key', `steps-${end}`)
      .send({ tag, end });
    expect(plain.status).toBe(201);
    expect(keyed.status).toBe(201);
    // As without the library: the request's own timeout back, no tenant left set.
    expect(keyed.body).toEqual(plain.body);
    expect(keyed.body).toMatchObject({ timeout: keyed.body.before, tenant: '', region: '' });
    expect(await tags(tag)).toEqual(kept);
  });
});
