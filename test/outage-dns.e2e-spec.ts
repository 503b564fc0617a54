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
} from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/**
 * Found by the adversarial review of the outage rules: on TypeORM, a handler's plain reads before its first write run on a
 * connection of TypeORM's own (lazy-transaction.ts `readAlone`), whose connect error is only
 * *marked* as the database's (markDatabaseFailure), then classified by its code. A database
 * that cannot be reached for a reason outside NETWORK_CODES fails that connect with:
 * - `getaddrinfo ENOTFOUND <host>`: its DNS name is gone (the database's container or
 *   Service restarting, a DNS outage answering NXDOMAIN);
 * - `connect ENOENT /run/postgresql/.s.PGSQL.5432`: over a Unix socket, while PostgreSQL
 *   restarts (the socket file is removed).
 * Both are outages (the acquire path wraps the same errors as DatabaseConnectionError: 503),
 * but here they are taken for the handler's own answer: a 500, stored and replayed.
 */
let gateReached!: () => void;
let gateOpen!: Promise<void>;
let openGate!: () => void;
let runs = 0;
let met = '';

@Controller()
class ReadController {
  constructor(private readonly dataSource: DataSource) {}

  @Post('report')
  @Idempotent()
  async report() {
    runs += 1;
    gateReached();
    await gateOpen;
    // A plain read, the handler's first database work: TypeORM's own runner, a new connection.
    try {
      const rows = await this.dataSource.query('SELECT 1 AS one');
      return { rows };
    } catch (error) {
      met = `${(error as Error).name} ${(error as { code?: string }).code}: ${(error as Error).message}`;
      throw error;
    }
  }
}

const FAULTS: Array<[string, (url: URL) => string]> = [
  [
    'its DNS name no longer resolves (ENOTFOUND)',
    (url) => {
      const broken = new URL(url);
      broken.hostname = 'advoutage-db.invalid';
      return broken.toString();
    },
  ],
  // The control: a refused connection (in NETWORK_CODES) is answered 503, as promised.
  [
    'it refuses the connection (ECONNREFUSED, the control)',
    (url) => {
      const broken = new URL(url);
      broken.port = '1';
      return broken.toString();
    },
  ],
  [
    'its Unix socket is gone while it restarts (ENOENT)',
    (url) =>
      `postgresql://${url.username}@/${url.pathname.slice(1)}?host=/tmp/advoutage-no-such-socket-dir`,
  ],
];

describe.each(FAULTS)('the database unreachable: %s, under a TypeORM read', (_name, brokenUrl) => {
  let database: TestDatabase;
  let app: INestApplication;
  let pool: Pool & { options: Record<string, unknown>; Client: new (options: object) => unknown };

  beforeAll(async () => {
    database = await createTestDatabase('adv_dns');
    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
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
    pool = (app.get(DataSource).driver as unknown as { master: typeof pool }).master;
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  it('answers 503 with Retry-After and stores nothing; the retry runs once the database is back', async () => {
    runs = 0;
    const good = pool.options.connectionString as string;
    const arrived = new Promise<void>((resolve) => (gateReached = resolve));
    gateOpen = new Promise<void>((resolve) => (openGate = resolve));
    const pending = request(app.getHttpServer())
      .post('/report')
      .set('Idempotency-Key', 'r1')
      .send({});
    const answer = pending.then((res) => res);
    await arrived;
    // The database restarts: its backends are terminated (the pool's idle connections go)...
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
    // ...and the next connect attempt cannot reach it (one failed lookup, or the socket file
    // missing for that moment); the one after that gets through.
    const Original = pool.Client;
    let armed = true;
    pool.Client = class extends (Original as new (options: object) => object) {
      constructor(options: Record<string, unknown>) {
        const broken = armed ? { ...options, connectionString: brokenUrl(new URL(good)) } : options;
        armed = false;
        super(broken);
      }
    } as typeof pool.Client;
    openGate();
    const first = await answer;
    pool.Client = Original;
    gateOpen = Promise.resolve();
    gateReached = () => undefined;
    const retry = await request(app.getHttpServer())
      .post('/report')
      .set('Idempotency-Key', 'r1')
      .send({});
    const db = new Client({ connectionString: database.url });
    await db.connect();
    const { rows } = await db.query('SELECT state, response_code FROM idempotency_keys');
    await db.end();
    const seen = {
      first: { status: first.status, body: first.body, retryAfter: first.headers['retry-after'] },
      retry: {
        status: retry.status,
        replayed: retry.headers['idempotent-replayed'],
        body: retry.body,
      },
      stored: rows,
      runs,
      handlerMet: met,
    };
    console.log(JSON.stringify(seen));
    expect(seen.first.status).toBe(503);
    expect(seen.first.retryAfter).toBeDefined();
    expect(seen.retry.status).toBe(201);
    expect(seen.runs).toBe(2);
  }, 60_000);
});
