import { readFileSync } from 'node:fs';
import {
  Body,
  ConflictException,
  Controller,
  type INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client, type Pool } from 'pg';
import QueryStream from 'pg-query-stream';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 5: the text of a pg-query-stream is never read. The library reads a
 * statement's text with `textOf(statement)`: the string, or the object's `text`. A
 * pg-query-stream `QueryStream` keeps its text on its cursor (`stream.cursor.text`), not on
 * itself, so every check (a `COMMIT`, a session setting, an advisory lock, the read-only
 * mode) reads `undefined` and lets it through. TypeORM's own `queryRunner.stream()` (and a
 * query builder's `stream()`) sends a `QueryStream`; so does pg-query-stream on a client of
 * the pool (data-layers.md names it). A `COMMIT` sent so commits the request's transaction
 * mid-handler: the handler's write before it stays although the handler then fails (409,
 * stored as "the effects rolled back"). Without the library the same stream runs on a
 * connection of its own, outside any transaction: the write, on another, is its own too; the
 * promise is the library's table: the effects rolled back with the 409, or a clear refusal.
 */
let pool: Pool;

/** Writes its mark, streams `text` (read to its end), then fails. */
async function markStreamFail(tag: string, send: () => Promise<AsyncIterable<unknown>>) {
  await pool.query('INSERT INTO marks (tag) VALUES ($1)', [tag]);
  for await (const row of await send()) void row;
  throw new ConflictException('the order was already shipped');
}

@Controller()
class StreamController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** TypeORM's runner.stream(), as a query builder's stream() calls it. */
  @Post('typeorm')
  @Idempotent()
  async typeorm(@Body() body: { tag: string; text: string }) {
    await this.dataSource.query('INSERT INTO marks (tag) VALUES ($1)', [body.tag]);
    const runner = this.dataSource.createQueryRunner();
    try {
      const stream = await runner.stream(body.text);
      for await (const row of stream as AsyncIterable<unknown>) void row;
    } finally {
      await runner.release();
    }
    throw new ConflictException('the order was already shipped');
  }

  /** pg-query-stream on a client of the pool given to the library. */
  @Post('pool')
  @Idempotent()
  poolStream(@Body() body: { tag: string; text: string }) {
    return markStreamFail(body.tag, async () => {
      const client = await pool.connect();
      const stream = client.query(new QueryStream(body.text));
      stream.on('close', () => client.release());
      return stream;
    });
  }
}

describe('adversary 5: a COMMIT sent as a pg-query-stream', () => {
  let database: TestDatabase;
  let admin: Client;

  beforeAll(async () => {
    database = await createTestDatabase('adv5_query_stream_text');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE marks (tag text NOT NULL)');
    pool = createTestPool({ connectionString: database.url, max: 4 });
    pool.on('error', () => undefined);
  });

  afterAll(async () => {
    await endTestPool(pool);
    await admin?.end();
    await database?.drop();
  });

  const marks = async (tag: string) =>
    (await admin.query('SELECT 1 FROM marks WHERE tag = $1', [tag])).rows.length;

  const cases: [string, string][] = [
    ['TypeORM runner.stream()', 'typeorm'],
    ['pg-query-stream on the pool', 'pool'],
  ];
  describe.each(cases)('%s', (_name, path) => {
    let app: INestApplication;

    beforeAll(async () => {
      @Module({
        imports:
          path === 'typeorm'
            ? [
                TypeOrmModule.forRoot({
                  type: 'postgres',
                  url: database.url,
                  migrations: [...IDEMPOTENCY_MIGRATIONS],
                  migrationsRun: false,
                  extra: { max: 4 },
                }),
                IdempotencyModule.forRoot({ globalKeys: true }),
              ]
            : [
                TypeOrmModule.forRoot({
                  type: 'postgres',
                  url: database.url,
                  extra: { max: 1 },
                }),
                IdempotencyModule.forRootAsync({
                  useFactory: () => ({ globalKeys: true, pool }),
                }),
              ],
        controllers: [StreamController],
      })
      class StreamModule {}
      app = await bootstrapTestApp(StreamModule, 'express');
    });

    afterAll(async () => {
      await app?.close();
    });

    it('a COMMIT: refused, or the write rolled back with the 409; never committed mid-handler', async () => {
      const tag = `commit-${path}`;
      const send = () =>
        request(app.getHttpServer())
          .post(`/${path}`)
          .set('Idempotency-Key', tag)
          .send({ tag, text: 'COMMIT' });
      const first = await send();
      const retry = await send();
      expect({
        status: first.status,
        retry: retry.status,
        kept: await marks(tag),
      }).toEqual({
        status: first.status === 409 ? 409 : 500,
        retry: first.status === 409 ? 409 : retry.status,
        kept: 0,
      });
    }, 30_000);
  });
});
