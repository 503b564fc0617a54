import { Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../lib/index.js';
import { bootstrapTestApp } from '../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { startPgBouncer, type TestPgBouncer } from '../support/pgbouncer.js';
import { SlowAnswerProxy } from '../support/slow-answer-proxy.js';

/**
 * Found by an adversarial review (issue 27): late answers behind PgBouncer in transaction mode (app → PgBouncer → a proxy that
 * holds the server's answer back → PostgreSQL), a pool of one server connection: the cancel
 * request goes through PgBouncer, which routes it by the client connection.
 */
let executions = 0;

@Controller()
class PaymentsController {
  @Post('payments')
  @Idempotent()
  create() {
    executions++;
    return { ok: true };
  }
}

@Module({ controllers: [PaymentsController] })
class PaymentsModule {}

const CLAIM = /idempotency_claim_v|INSERT INTO idempotency_keys/;
const TAKE_OVER = /idempotency_take_over|lock_version = lock_version \+ 1/;
const NEVER = /(?!)/;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('late answers behind PgBouncer (transaction mode)', () => {
  let database: TestDatabase;
  let proxy: SlowAnswerProxy;
  let bouncer: TestPgBouncer;
  let app: INestApplication;
  let db: Client;

  beforeAll(async () => {
    database = await createTestDatabase('adv_late_bouncer');
    const migrations = new DataSource({
      type: 'postgres',
      url: database.url,
      migrations: IDEMPOTENCY_MIGRATIONS,
    });
    await migrations.initialize();
    await migrations.runMigrations();
    await migrations.destroy();
    const direct = new URL(database.url);
    proxy = new SlowAnswerProxy(Number(direct.port || 5432), 700, NEVER);
    await proxy.start();
    // PgBouncer reaches the server through the proxy.
    const admin = process.env.TEST_DATABASE_URL!;
    const viaProxy = new URL(admin);
    viaProxy.hostname = '127.0.0.1';
    viaProxy.port = String(proxy.port);
    process.env.TEST_DATABASE_URL = viaProxy.toString();
    try {
      bouncer = await startPgBouncer({ poolMode: 'transaction', poolSize: 1 });
    } finally {
      process.env.TEST_DATABASE_URL = admin;
    }
    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: bouncer.url(database.name),
          logging: false,
        }),
        IdempotencyModule.forRoot({
          globalKeys: true,
          databaseTimeoutMs: 400,
          pooler: 'transaction',
        }),
        PaymentsModule,
      ],
    })
    class AppModule {}
    app = await bootstrapTestApp(AppModule, 'express');
    db = new Client({ connectionString: database.url });
    await db.connect();
  });

  afterAll(async () => {
    await app?.close();
    await db?.end();
    await bouncer?.stop();
    await proxy?.stop();
    await database?.drop();
  });

  const pay = (key: string) =>
    request(app.getHttpServer()).post('/payments').set('Idempotency-Key', key).send({ amount: 1 });

  it('gives a late claim back: the retry a moment after its 503 runs the handler', async () => {
    executions = 0;
    proxy.trigger = CLAIM;
    expect((await pay('late-claim')).status).toBe(503);
    proxy.trigger = NEVER;
    await sleep(1500);
    const retry = await pay('late-claim');
    expect({ status: retry.status, executions }).toEqual({ status: 201, executions: 1 });
  });

  // What must hold: as without PgBouncer (late-takeover.e2e-spec.ts), the late takeover is
  // given back and the retry runs: 201. It was: 409 key_in_progress for the lease.
  it('gives a late takeover back: the retry a moment after its 503 runs', async () => {
    expect((await pay('first')).status).toBe(201);
    await db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
       SELECT tenant_id, 'crashed', fingerprint, now() - interval '1 second'
       FROM idempotency_keys WHERE key = 'first'`,
    );
    executions = 0;
    proxy.trigger = TAKE_OVER;
    expect((await pay('crashed')).status).toBe(503);
    proxy.trigger = NEVER;
    await sleep(1500);
    const retry = await pay('crashed');
    expect({ status: retry.status, code: retry.body.code, executions }).toEqual({
      status: 201,
      code: undefined,
      executions: 1,
    });
  });
});
