import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { DataSource } from 'typeorm';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

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
/** The messages of what the handler's statements were refused with. */
const refusals: string[] = [];

async function handle(body: { statement: string; slot?: string }) {
  runs++;
  if (body.slot) await pool.query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
  try {
    await pool.query(body.statement);
  } catch (error) {
    refusals.push((error as Error).message);
    throw error;
  }
  const { rows } = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM slots');
  return { n: rows[0].n };
}

@Controller()
class ReportController {
  @Post('report')
  @Idempotent()
  report(@Body() body: { statement: string; slot?: string }) {
    return handle(body);
  }

  @Post('plain-report')
  plain(@Body() body: { statement: string; slot?: string }) {
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

  private async handle(body: { statement: string; slot?: string }) {
    runs++;
    if (body.slot) await this.dataSource.query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
    try {
      await this.dataSource.query(body.statement);
    } catch (error) {
      refusals.push((error as Error).message);
      throw error;
    }
    const [row] = (await this.dataSource.query('SELECT count(*)::int AS n FROM slots')) as {
      n: number;
    }[];
    return { n: row.n };
  }

  @Post('report')
  @Idempotent()
  report(@Body() body: { statement: string; slot?: string }) {
    return this.handle(body);
  }

  @Post('plain-report')
  plain(@Body() body: { statement: string; slot?: string }) {
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
    // Read-only mode set where no reader of SQL text can see it: inside a function.
    await admin.query(`CREATE FUNCTION go_read_only() RETURNS void LANGUAGE plpgsql AS $$
      BEGIN PERFORM set_config('transaction_read_only', 'on', true); END $$`);
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
    // Adversary round 3: other spellings of the same mode, each alone in its text.
    ['pool', "SELECT set_config('transaction_read_only', 'on', false)"],
    ['typeorm', "SELECT set_config('transaction_read_only', 'on', false)"],
    ['typeorm', 'SET LOCAL transaction_read_only = on'],
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
      const key = `${seam}-${Buffer.from(statement).toString('base64url')}`;
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

  const server = (seam: string) => (seam === 'pool' ? app : ormApp).getHttpServer();
  const rows = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;

  it.each([
    ['pool', 'SET TRANSACTION READ ONLY; SELECT 1'],
    ['typeorm', 'SET TRANSACTION READ ONLY; SELECT 1'],
    ['pool', "SELECT 1; SELECT set_config('transaction_read_only', 'on', false)"],
  ])(
    '%s, %s (adversary round 3: 503 on every try): refused as sent, a final 500, nothing kept',
    async (seam, statement) => {
      refusals.length = 0;
      runs = 0;
      const slot = `${seam}-${Buffer.from(statement).toString('base64url')}`;
      const send = () =>
        request(server(seam))
          .post('/report')
          .set('Idempotency-Key', slot)
          .send({ statement, slot });
      const first = await send();
      expect(first.status).toBe(500);
      expect(refusals).toEqual([
        expect.stringMatching(
          /^A text that makes the transaction read only .* Open a transaction for the read-only work/,
        ),
      ]);
      expect(await rows(slot)).toBe(0);
      // Final: the retry replays the 500 without running the handler.
      const retry = await send();
      expect({ status: retry.status, text: retry.text, runs }).toEqual({
        status: 500,
        text: first.text,
        runs: 1,
      });
    },
  );

  it.each(['pool', 'typeorm'])(
    '%s: read-only mode set inside a function of the app: 500 database_permanent with the cause, never a 503, nothing kept',
    async (seam) => {
      runs = 0;
      const slot = `${seam}-function`;
      const send = () =>
        request(server(seam))
          .post('/report')
          .set('Idempotency-Key', slot)
          .send({ statement: 'SELECT go_read_only()', slot });
      const first = await send();
      expect({
        status: first.status,
        code: (first.body as { code?: string }).code,
        retryAfter: first.headers['retry-after'],
      }).toEqual({ status: 500, code: 'database_permanent', retryAfter: undefined });
      expect(await rows(slot)).toBe(0);
      // Nothing stored: the retry runs again, and meets the same answer.
      const retry = await send();
      expect({ status: retry.status, runs }).toEqual({ status: 500, runs: 2 });
      expect(await rows(slot)).toBe(0);
    },
  );
});
