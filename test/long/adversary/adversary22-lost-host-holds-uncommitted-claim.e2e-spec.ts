import { Body, Controller, Module, Post } from '@nestjs/common';
import { readFileSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { type INestApplication } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 22: on a `oneCommit` route, an instance lost while its handler runs (its
 * host powered off, or cut off by a network partition: PostgreSQL is never told, no FIN, no
 * RST) leaves its uncommitted claim, with the key's advisory lock, held by a backend idle in
 * transaction until TCP keepalive gives up on the socket: on Linux defaults
 * (`tcp_keepalives_idle` 0 = 7200 s, 9 probes 75 s apart) about 2 h 11 min. For all that time
 * every retry with the key waits `claimWaitMs` and gets 409: leases (`leaseMs`), the design's
 * answer to a worker that stops, do not apply. The same loss on a route without `oneCommit`
 * is over when the lease ends (here the commit's 503 even gave the key back: the retry runs
 * at once).
 *
 * What the app does (Express, pool): `POST /orders` (`leaseMs: 1000`, `claimWaitMs: 300`)
 * inserts its order, then finishes some in-memory work. The instance's path to PostgreSQL is
 * lost while the handler runs (the test's proxy stops forwarding that connection and never
 * closes PostgreSQL's side, as a vanished host does). The client's retries come after the
 * lease is long over, from 3 s to 6 s.
 *
 * What happens: the claim is a statement of the request's transaction (claim-with-work.ts:31,
 * postgres-claim.store.ts:146-151 `beginWithClaim`): no lease protects it, only the
 * transaction. request-transaction.ts `beginWithClaim` sets no bound on the transaction's
 * idle time (no `idle_in_transaction_session_timeout`, no keepalive on the connection), so
 * the backend sits idle in transaction, holding the row and `pg_advisory_xact_lock`; each
 * retry's `claimIn` waits `claimWaitMs` for that lock (55P03) and answers `held`: 409, with
 * `Retry-After` that invites more retries into the same wall.
 *
 * What should happen: idempotency-options.interface.ts (`oneCommit`): "a process killed
 * before the commit leaves no trace, and the retry runs at once". The design's lease
 * (`leaseMs`: a worker that stops loses the key when its lease runs out, and a retry takes it
 * over) bounds how long a lost worker blocks its key; a route that opts into one commit should
 * not trade that bound for the operating system's keepalive (hours).
 *
 * Why it matters: host losses and partitions are the crashes idempotency keys exist for. A
 * payment whose instance vanished mid-request cannot be retried for two hours: every client
 * retry budget (seconds to minutes) is exhausted with 409s; the operation is lost to the user,
 * though nothing of it committed. Without `oneCommit` the same loss costs one lease.
 *
 * Severity: medium (availability of the key for hours after a host loss; no double effect).
 */
let pool: Pool;
let letGo: () => void = () => undefined;
let handlerBegan: () => void = () => undefined;
/** Whether the next handler waits for `letGo` (the first request of each case does). */
let holdNext = false;

@Controller()
class OrdersController {
  private async order(text: string) {
    await pool.query('INSERT INTO notes (text) VALUES ($1)', [text]);
    if (holdNext) {
      holdNext = false;
      await new Promise<void>((resolve) => {
        letGo = resolve;
        handlerBegan();
      });
    }
    return { text };
  }

  @Post('orders-one-commit')
  @Idempotent({ oneCommit: true })
  oneCommit(@Body() body: { text: string }) {
    return this.order(body.text);
  }

  @Post('orders')
  @Idempotent()
  twoCommits(@Body() body: { text: string }) {
    return this.order(body.text);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({
        globalKeys: true,
        pool,
        leaseMs: 1000,
        claimWaitMs: 300,
        databaseTimeoutMs: 1500,
      }),
    }),
  ],
  controllers: [OrdersController],
})
class OrdersModule {}

/** A TCP proxy that can lose one connection the way a vanished host does. */
class LosingProxy {
  private server?: Server;
  private readonly pairs = new Set<{ app: Socket; database: Socket; lost: boolean }>();
  port = 0;

  async start(): Promise<void> {
    this.server = createServer((app) => {
      const database = connect(5432, '127.0.0.1');
      const pair = { app, database, lost: false };
      this.pairs.add(pair);
      app.pipe(database).pipe(app);
      // A lost path tells PostgreSQL nothing when the app's side closes.
      app.on('error', () => undefined).on('close', () => pair.lost || database.destroy());
      database.on('error', () => undefined).on('close', () => pair.lost || app.destroy());
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.port = (this.server.address() as { port: number }).port;
  }

  /** Stops the connection PostgreSQL sees from `clientPort`, both ways, for good. */
  lose(clientPort: number): void {
    for (const pair of this.pairs) {
      if (pair.database.localPort !== clientPort) continue;
      pair.lost = true;
      pair.app.unpipe(pair.database);
      pair.database.unpipe(pair.app);
      pair.app.pause();
      pair.database.pause();
      // The app's side breaks (its sends go nowhere); PostgreSQL's side stays open.
      setTimeout(() => pair.app.destroy(), 100);
      return;
    }
    throw new Error(`no connection from port ${clientPort}`);
  }

  async close(): Promise<void> {
    for (const { app, database } of this.pairs) {
      app.destroy();
      database.destroy();
    }
    await new Promise((resolve) => this.server?.close(resolve));
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

describe('adversary 22: a lost host leaves its oneCommit claim held for hours', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;
  const proxy = new LosingProxy();

  beforeAll(async () => {
    database = await createTestDatabase('adv22_lost_host');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL)');
    await proxy.start();
    const url = new URL(database.url);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    pool = createTestPool({ connectionString: url.toString(), max: 6 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(OrdersModule);
  }, 60_000);

  afterAll(async () => {
    await admin
      ?.query(
        'SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
      )
      .catch(() => undefined);
    const bounded = (work: Promise<unknown> | undefined) =>
      Promise.race([work?.catch(() => undefined), sleep(5000)]);
    await bounded(app?.close());
    await bounded(proxy.close());
    await bounded(endTestPool(pool));
    await admin?.end().catch(() => undefined);
    await database?.drop();
  });

  /** The backend of the connection lost in the current case. */
  let lostBackend: number | undefined;
  afterEach(async () => {
    // What TCP keepalive would do, hours later.
    if (lostBackend) await admin.query('SELECT pg_terminate_backend($1)', [lostBackend]);
    lostBackend = undefined;
  });

  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const rows = async (text: string) =>
    Number((await admin.query('SELECT count(*) FROM notes WHERE text = $1', [text])).rows[0].count);

  /** Runs the first request, loses its connection while its handler runs; its answer. */
  async function firstRequestLost(path: string, key: string, text: string) {
    const began = new Promise<void>((resolve) => (handlerBegan = resolve));
    holdNext = true;
    const first = post(path, key, { text }).then((r) => r);
    await began;
    const { rows: idle } = await admin.query<{ client_port: number; pid: number }>(
      `SELECT client_port, pid FROM pg_stat_activity
       WHERE datname = current_database() AND state = 'idle in transaction'`,
    );
    expect(idle).toHaveLength(1);
    lostBackend = idle[0].pid;
    proxy.lose(idle[0].client_port);
    letGo();
    return first;
  }

  /** The client's retries from 3 s to 6 s after the loss (the lease is 1 s). */
  async function retries(path: string, key: string, text: string) {
    await sleep(3000);
    const statuses: number[] = [];
    for (let i = 0; i < 4; i++) {
      const retry = await post(path, key, { text });
      statuses.push(retry.status);
      if (retry.status !== 409) break;
      await sleep(700);
    }
    return statuses;
  }

  it('control: without oneCommit, the retry runs once the lease is over', async () => {
    const first = await firstRequestLost('/orders', 'adv22-lost-control', 'control');
    expect(first.status).toBe(503);
    const statuses = await retries('/orders', 'adv22-lost-control', 'control');
    expect({ statuses, rows: await rows('control') }).toEqual({ statuses: [201], rows: 1 });
  }, 30_000);

  it('oneCommit: the retry runs once the lease is over (fails: 409 until keepalive)', async () => {
    const first = await firstRequestLost('/orders-one-commit', 'adv22-lost-one', 'one');
    expect(first.status).toBe(503);
    const statuses = await retries('/orders-one-commit', 'adv22-lost-one', 'one');
    // Fixed: the claim's transaction is bounded by idle_in_transaction_session_timeout = the
    // lease (a live worker's heartbeat renews inside it): the lost host's backend was ended.
    const { rows: held } = await admin.query(
      `SELECT 1 FROM pg_stat_activity
       WHERE datname = current_database() AND state = 'idle in transaction'`,
    );
    expect(held).toHaveLength(0);
    // Received: statuses [409, 409, 409, 409] (3 s to 6 s after a 1 s lease), rows 0.
    expect({ statuses, rows: await rows('one') }).toEqual({ statuses: [201], rows: 1 });
  }, 30_000);
});
