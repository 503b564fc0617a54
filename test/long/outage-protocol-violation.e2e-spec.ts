import {
  Controller,
  type DynamicModule,
  type INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { readFileSync } from 'node:fs';
import { Client, Pool } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyErrorFilter,
  IdempotencyModule,
  Idempotent,
  ProcessedMessages,
} from '../../lib/index.js';
import { bootstrapTestApp } from '../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

/**
 * Found by the adversarial review of the outage rules: a handler's own permanent bug whose SQLSTATE is of class 08 is taken
 * for a database outage. node-postgres sends a Bind message whose parameter count is an Int16:
 * a statement with more than 65535 parameters (a bulk insert of many rows) is answered by
 * PostgreSQL with `08P01 bind message has N parameter formats but 0 parameters`, severity
 * ERROR, on a connection that stays healthy. Every attempt meets it again: it is the
 * handler's final answer (a 500, stored and replayed), never a 503 with Retry-After that
 * re-runs the handler's effects on every retry for ever.
 */
const PARAMS = 70_000;
const BULK = `INSERT INTO bulk_rows (v) VALUES ${Array.from({ length: PARAMS }, (_, i) => `($${i + 1})`).join(',')}`;
const VALUES = Array.from({ length: PARAMS }, (_, i) => i);

/** Stands for the handler's external effect (a charge, an email) made before the write. */
let externalCalls = 0;

function controllerFor(run: (sql: string, values: unknown[]) => Promise<unknown>) {
  @Controller()
  class BulkController {
    @Post('bulk')
    @Idempotent()
    async bulk() {
      externalCalls += 1;
      await run(BULK, VALUES);
      return { inserted: PARAMS };
    }

    /** The same statement as a consumer's delivery (a webhook's bulk import). */
    @Post('bulk-message')
    async bulkMessage() {
      externalCalls += 1;
      await this.messages.processOnce('bulk', 'message-1', async () => run(BULK, VALUES));
      return { processed: true };
    }

    constructor(private readonly messages: ProcessedMessages) {}
  }
  return BulkController;
}

@Module({})
class BulkModule {
  static register(url: string, typeorm: boolean): DynamicModule {
    if (typeorm) {
      let dataSource!: DataSource;
      return {
        module: BulkModule,
        imports: [
          TypeOrmModule.forRoot({
            type: 'postgres',
            url,
            migrations: IDEMPOTENCY_MIGRATIONS,
            migrationsRun: true,
          }),
          IdempotencyModule.forRoot({ tenant: () => '1', databaseTimeoutMs: 5000 }),
        ],
        controllers: [controllerFor((sql, values) => dataSource.query(sql, values))],
        providers: [
          { provide: APP_FILTER, useClass: IdempotencyErrorFilter },
          {
            provide: 'grab',
            inject: [DataSource],
            useFactory: (source: DataSource) => (dataSource = source),
          },
        ],
      };
    }
    const pool = new Pool({ connectionString: url, max: 4 });
    pool.on('error', () => undefined);
    return {
      module: BulkModule,
      imports: [IdempotencyModule.forRoot({ pool, tenant: () => '1', databaseTimeoutMs: 5000 })],
      controllers: [controllerFor((sql, values) => pool.query(sql, values))],
      providers: [{ provide: APP_FILTER, useClass: IdempotencyErrorFilter }],
    };
  }
}

describe.each([
  ['TypeORM', true],
  ['a pg.Pool', false],
] as const)('a handler statement with > 65535 parameters (08P01), on %s', (_name, typeorm) => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase(`adv_08p01_${typeorm ? 'typeorm' : 'pool'}`);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    if (!typeorm) await db.query(readFileSync('migrations/schema.sql', 'utf8'));
    await db.query('CREATE TABLE bulk_rows (v int NOT NULL)');
    await db.end();
    @Module({ imports: [BulkModule.register(database.url, typeorm)] })
    class Root {}
    app = await bootstrapTestApp(Root);
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  it('is the handler’s final 500, replayed, not a 503 that re-runs its effects', async () => {
    externalCalls = 0;
    const key = `bulk-${typeorm}`;
    const first = await request(app.getHttpServer())
      .post('/bulk')
      .set('Idempotency-Key', key)
      .send({});
    const second = await request(app.getHttpServer())
      .post('/bulk')
      .set('Idempotency-Key', key)
      .send({});
    const seen = {
      first: { status: first.status, retryAfter: first.headers['retry-after'], body: first.body },
      second: { status: second.status, body: second.body },
      externalCalls,
    };
    console.log(JSON.stringify(seen));
    // The permanent bug must not be answered as the store being unavailable...
    expect(seen.first.status).not.toBe(503);
    expect(seen.first.retryAfter).toBeUndefined();
    // ...and the retry replays the first answer without running the handler again.
    expect(seen.second.status).toBe(seen.first.status);
    expect(seen.externalCalls).toBe(1);
  }, 60_000);

  it('a delivery (processOnce) meeting it is not a passing outage (503), redelivered for ever', async () => {
    externalCalls = 0;
    const first = await request(app.getHttpServer()).post('/bulk-message').send({});
    const seen = {
      status: first.status,
      body: first.body,
      retryAfter: first.headers['retry-after'],
    };
    console.log(JSON.stringify(seen));
    expect(seen.status).not.toBe(503);
    expect(seen.retryAfter).toBeUndefined();
  }, 60_000);
});
