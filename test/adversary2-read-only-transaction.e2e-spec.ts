import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { createTestPool, endTestPool } from './support/test-pool.js';

/**
 * Adversary, round 2 (issue 27): a handler that only reads and says so first, through the pool
 * (`pool.query`, Drizzle's `db.execute`, Prisma's `$executeRaw`): `SET TRANSACTION READ ONLY`
 * (or `SET transaction_read_only = on`; on TypeORM `dataSource.query()` alike). Without the library it is a no-op outside a
 * transaction block: 201. The library sends it into the request's transaction (only a
 * `SET TRANSACTION ISOLATION LEVEL …` first statement is taken apart: `leadingIsolationOf`,
 * pool-transaction.ts, whose READ ONLY the docs say is not carried over), which becomes read
 * only, and the library's own stored-answer UPDATE there fails (25006): 503 store_unavailable
 * "the idempotency store became unavailable … retry later" with Retry-After, on every try,
 * the handler run again each time. Expected: the request's transaction stays able to store its
 * answer (201, replayed byte for byte), as when READ ONLY comes with a level; or the
 * statement refused at once with words that say what to do; never a 503 on every try.
 */
let pool: Pool;
let runs = 0;

async function handle(body: { statement: string }) {
  runs++;
  await pool.query(body.statement);
  const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM slots');
  return { n: rows[0].n };
}

@Controller()
class ReportController {
  @Post('report')
  @Idempotent()
  report(@Body() body: { statement: string }) {
    return handle(body);
  }

  @Post('plain-report')
  plain(@Body() body: { statement: string }) {
    return handle(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReportController],
})
class ReportModule {}

/** The same on TypeORM: `dataSource.query()`. */
@Controller()
class OrmReportController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async handle(body: { statement: string }) {
    runs++;
    await this.dataSource.query(body.statement);
    const [row] = (await this.dataSource.query('SELECT count(*)::int AS n FROM slots')) as {
      n: number;
    }[];
    return { n: row.n };
  }

  @Post('report')
  @Idempotent()
  report(@Body() body: { statement: string }) {
    return this.handle(body);
  }

  @Post('plain-report')
  plain(@Body() body: { statement: string }) {
    return this.handle(body);
  }
}

describe('adversary 2: a read-only first statement through the pool', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;
  let ormApp: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv2_read_only');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text)');
    pool = createTestPool({ connectionString: database.url, max: 2 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(ReportModule, 'express');

    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: false,
          extra: { max: 2 },
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
      ],
      controllers: [OrmReportController],
    })
    class OrmReportModule {}
    ormApp = await bootstrapTestApp(OrmReportModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await ormApp?.close();
    await endTestPool(pool);
    await admin?.end();
    await database?.drop();
  });

  it.each([
    ['pool', 'SET TRANSACTION READ ONLY'],
    ['pool', 'SET transaction_read_only = on'],
    ['typeorm', 'SET TRANSACTION READ ONLY'],
  ])(
    '%s, %s: 201 as without the library, run once, the retry replays it',
    async (seam, statement) => {
      const server = (seam === 'pool' ? app : ormApp).getHttpServer();
      // The control: without @Idempotent() the statement is a no-op.
      const plain = await request(server).post('/plain-report').send({ statement });
      expect({ status: plain.status, body: plain.body as unknown }).toEqual({
        status: 201,
        body: { n: 0 },
      });
      runs = 0;
      const key = `${seam}-${statement.replace(/\W+/g, '-')}`;
      const send = () =>
        request(server).post('/report').set('Idempotency-Key', key).send({ statement });
      const first = await send();
      const retry = await send();
      expect({
        status: first.status,
        body: first.body as unknown,
        replayed: retry.text === first.text && retry.headers['idempotent-replayed'] === 'true',
        runs,
      }).toEqual({ status: 201, body: { n: 0 }, replayed: true, runs: 1 });
    },
  );
});
