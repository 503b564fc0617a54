import { Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyErrorFilter,
  IdempotencyModule,
  Idempotent,
} from '../../lib/index.js';
import { bootstrapTestApp } from '../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { TcpProxy } from '../support/tcp-proxy.js';

/**
 * Found by the adversarial review of the outage rules: the database hangs (a blackholed network: connections open, nothing
 * answers) just as a TypeORM handler makes its first plain read. The read runs apart on a
 * connection of TypeORM's own (lazy-transaction.ts `readAlone`), connected by TypeORM's pool
 * without the module's deadline (databaseTimeoutMs, 2 s here): with TypeORM's default
 * connectTimeoutMS (none), the request never gets an answer. Every other wait for a
 * connection is bounded (deadline.ts `acquire`), and the pg.Pool data layer's read apart
 * (`sendAlone`) answers 503 in 2 s.
 */
let gateReached!: () => void;
let gateOpen!: Promise<void>;
let openGate!: () => void;

@Controller()
class ReadController {
  constructor(private readonly dataSource: DataSource) {}

  @Post('report')
  @Idempotent()
  async report() {
    gateReached();
    await gateOpen;
    return { rows: await this.dataSource.query('SELECT 1 AS one') };
  }
}

describe('the database hangs under a TypeORM handler’s first plain read', () => {
  let database: TestDatabase;
  let proxy: TcpProxy;
  let app: INestApplication;
  let pool: Pool;

  beforeAll(async () => {
    database = await createTestDatabase('adv_hang');
    const target = new URL(database.url);
    proxy = new TcpProxy(target.hostname, Number(target.port || 5432));
    await proxy.start();
    const via = new URL(database.url);
    via.host = `127.0.0.1:${proxy.port}`;
    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: via.toString(),
          migrations: IDEMPOTENCY_MIGRATIONS,
          migrationsRun: true,
        }),
        IdempotencyModule.forRoot({ tenant: () => '1', databaseTimeoutMs: 2000 }),
      ],
      controllers: [ReadController],
      providers: [{ provide: APP_FILTER, useClass: IdempotencyErrorFilter }],
    })
    class Root {}
    app = await bootstrapTestApp(Root);
    pool = (app.get(DataSource).driver as unknown as { master: Pool }).master;
  }, 60_000);

  afterAll(async () => {
    await proxy?.restore();
    openGate?.();
    await app?.close().catch(() => undefined);
    await proxy?.stop();
    await database?.drop();
  }, 60_000);

  it('answers 503 within the module’s deadline (plus slack), not never', async () => {
    const arrived = new Promise<void>((resolve) => (gateReached = resolve));
    gateOpen = new Promise<void>((resolve) => (openGate = resolve));
    const started = Date.now();
    const answer = request(app.getHttpServer())
      .post('/report')
      .set('Idempotency-Key', 'h1')
      .send({})
      .timeout(15_000)
      .then(
        (res) => ({ status: res.status, body: res.body as unknown }),
        (error: Error) => ({ status: 0, body: error.message }),
      );
    await arrived;
    // The pool's idle connections go (the database's backends restart)...
    const admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
       WHERE datname = $1 AND pid <> pg_backend_pid()`,
      [database.name],
    );
    await admin.end();
    for (let i = 0; i < 100 && pool.totalCount > 0; i++) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    // ...and the network to it hangs.
    proxy.blackhole();
    openGate();
    const first = await answer;
    const direct = new Client({ connectionString: database.url });
    await direct.connect();
    const { rows } = await direct.query(
      `SELECT state, locked_until > clock_timestamp() AS leased FROM idempotency_keys`,
    );
    await direct.end();
    const seen = { ...first, afterMs: Date.now() - started, key: rows };
    console.log(JSON.stringify(seen));
    expect(seen.status).toBe(503);
  }, 60_000);
});
