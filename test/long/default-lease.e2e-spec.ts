import { type INestApplication } from '@nestjs/common';
import { createServer, type Server, type ServerResponse } from 'node:http';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { type ActiveClaim } from '../../lib/shapes/active-claim.js';
import { IdempotencyDatabase } from '../../lib/data-layers/idempotency-database.js';
import { PostgresClaimStore } from '../../lib/claim/postgres-claim.store.js';
import { createAtomicApp, LEDGER_DDL, type LedgerBody } from '../support/atomic-app.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { startWorker, type WorkerProcess } from '../support/worker-process.js';

/**
 * The default lease against an ordinary client's retries. Stripe's client retries a dropped
 * connection, a 409 and a 5xx 0.5, 1, 2 and 4 s apart (some 8 s in all) and ignores
 * Retry-After: a key held by a dead worker must be taken over within that window, or the
 * call ends without its result. A live worker slower than the lease must keep its key.
 * A real worker process, killed with SIGKILL; the module's defaults, nothing set.
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
/** Stripe's client's waits between attempts (no jitter here). */
const STRIPE_BACKOFF_MS = [500, 1000, 2000, 4000];
/** Longer than the lease and than the client's whole retry window. */
const SLOW_CALL_MS = 9500;

/** A downstream system whose first call of each path hangs `ms`; later calls answer at once. */
class Downstream {
  private server?: Server;
  private readonly answered = new Set<string>();
  private readonly waiting = new Map<string, () => void>();
  url = '';

  async start(): Promise<void> {
    this.server = createServer((req, res: ServerResponse) => {
      const { pathname, searchParams } = new URL(req.url!, 'http://x');
      const first = !this.answered.has(pathname);
      this.answered.add(pathname);
      this.waiting.get(pathname)?.();
      const answer = () => res.end('{}');
      if (first) setTimeout(answer, Number(searchParams.get('ms'))).unref();
      else answer();
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as { port: number }).port}`;
  }

  /** The URL of a call that hangs `ms` the first time; `called` resolves when it comes. */
  hanging(name: string, ms: number): { url: string; called: Promise<void> } {
    const path = `/${name}`;
    const called = new Promise<void>((resolve) => this.waiting.set(path, resolve));
    return { url: `${this.url}${path}?ms=${ms}`, called };
  }

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise<void>((resolve) => this.server?.close(() => resolve()) ?? resolve());
  }
}

/**
 * The PostgreSQL store whose heartbeat reaches the database `delayMs` late, as over a slow
 * path: a renewal is still on its way when the request ends and gives its key back.
 */
class SlowHeartbeatStore extends PostgresClaimStore {
  constructor(
    database: IdempotencyDatabase,
    private readonly delayMs: number,
  ) {
    super(database);
  }

  override async extendLease(claim: ActiveClaim): Promise<boolean> {
    await sleep(this.delayMs);
    return super.extendLease(claim);
  }
}

interface Attempt {
  status: number;
  /** Since the start of the retries' clock. */
  atMs: number;
}

// One database and one downstream system for both adapters' instances: their tags never meet.
let database: TestDatabase;
let db: Client;
let downstream: Downstream;
beforeAll(async () => {
  database = await createTestDatabase('default_lease');
  db = new Client({ connectionString: database.url });
  await db.connect();
  await db.query(LEDGER_DDL);
  downstream = new Downstream();
  await downstream.start();
});
afterAll(async () => {
  await downstream?.stop();
  await db?.end();
  await database?.drop();
});

// The lease, its heartbeat and the takeover live below the adapter; both adapters meet a crash
// under the default lease in test/long/stripe-client.e2e-spec.ts. Express alone here keeps npm test
// within its time.
describe.each(['express'] as const)('the default lease on %s', (adapter) => {
  /** The instance the retries reach, with the module's defaults. */
  let app: INestApplication;
  /** Other instances, in this process: one with the defaults, one without the heartbeat. */
  let live: INestApplication;
  let unbeating: INestApplication;
  /** Another instance as a process of its own, with the defaults: it is SIGKILLed. */
  let doomed: WorkerProcess;
  let n = 0;
  const tag = (label: string) => `${label}-${adapter}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    const started = startWorker('test/support/atomic-worker.js', {
      DATABASE_URL: database.url,
      ADAPTER: adapter,
    });
    app = await createAtomicApp({ databaseUrl: database.url, adapter });
    live = await createAtomicApp({ databaseUrl: database.url, adapter });
    unbeating = await createAtomicApp({
      databaseUrl: database.url,
      adapter,
      idempotency: { heartbeat: false },
    });
    doomed = await started;
  });
  afterAll(async () => {
    await doomed?.kill();
    await Promise.all([app, live, unbeating].map((instance) => instance?.close()));
  });

  const post = (target: INestApplication | string, body: LedgerBody) =>
    request(typeof target === 'string' ? target : target.getHttpServer())
      .post('/ledger')
      .set('Idempotency-Key', body.tag)
      .send(body);
  const rows = async (tagged: string) =>
    Number(
      (await db.query<{ n: string }>('SELECT count(*) AS n FROM ledger WHERE tag = $1', [tagged]))
        .rows[0].n,
    );
  /** What is left of the key's lease, by PostgreSQL's clock. */
  const leaseLeftMs = async (tagged: string) =>
    Number(
      (
        await db.query<{ ms: string }>(
          `SELECT extract(epoch FROM locked_until - clock_timestamp()) * 1000 AS ms
           FROM idempotency_keys WHERE key = $1`,
          [tagged],
        )
      ).rows[0].ms,
    );
  /**
   * Stripe's client's retries of `send` (on `app`), from `start`: 0.5, 1, 2 and 4 s apart,
   * Retry-After ignored; it stops at the first answer that is neither a 409 nor a 5xx.
   */
  const retryLikeStripe = async (body: LedgerBody, start: number): Promise<Attempt[]> => {
    const attempts: Attempt[] = [];
    for (const wait of STRIPE_BACKOFF_MS) {
      await sleep(wait);
      const res = await post(app, body);
      attempts.push({ status: res.status, atMs: Date.now() - start });
      if (res.status !== 409 && res.status < 500) break;
    }
    return attempts;
  };

  it('a worker SIGKILLed mid-handler: its key is taken over within Stripe’s retries, the work done once', async () => {
    const body: LedgerBody = { tag: tag('killed') };
    const call = downstream.hanging(body.tag, 60_000);
    body.callFirst = call.url;
    const first = post(doomed.url, body).then(
      (res) => res.status,
      (error: Error) => error.message,
    );
    await call.called; // the handler is waiting on the downstream system
    await sleep(1000); // and has been for a heartbeat or so
    const leftAtKill = await leaseLeftMs(body.tag);
    await doomed.kill('SIGKILL');
    const killedAt = Date.now();
    // The client's connection dropped with the process: it retries, on the live instance.
    expect(await first).toBe('socket hang up');

    const attempts = await retryLikeStripe(body, killedAt);
    const last = attempts[attempts.length - 1];
    console.log(
      `${adapter}: lease left at the kill ${Math.round(leftAtKill)} ms; attempts after the ` +
        `kill: ${attempts.map((a) => `${a.status} at ${a.atMs} ms`).join(', ')}`,
    );
    expect(last.status).toBe(201);
    expect(attempts.slice(0, -1).every((attempt) => attempt.status === 409)).toBe(true);
    expect(await rows(body.tag)).toBe(1);
    const replay = await post(app, body);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(await rows(body.tag)).toBe(1);
  });

  it('a live handler slower than the lease keeps its key (heartbeat); without the heartbeat it is taken over', async () => {
    const run = async (instance: INestApplication, label: string) => {
      const body: LedgerBody = { tag: tag(label) };
      const call = downstream.hanging(body.tag, SLOW_CALL_MS);
      body.callFirst = call.url;
      const answer = post(instance, body).then((res) => res);
      await call.called;
      const start = Date.now();
      const attempts = await retryLikeStripe(body, start);
      return { body, attempts, answer: await answer, answeredAtMs: Date.now() - start };
    };
    const [kept, lost] = await Promise.all([run(live, 'live'), run(unbeating, 'unbeating')]);
    console.log(
      `${adapter}: heartbeat on: ${kept.attempts.map((a) => `${a.status} at ${a.atMs} ms`).join(', ')}` +
        `, its own answer ${kept.answer.status} at ${kept.answeredAtMs} ms; heartbeat off: ` +
        `${lost.attempts.map((a) => `${a.status} at ${a.atMs} ms`).join(', ')}, its own answer ` +
        `${lost.answer.status} at ${lost.answeredAtMs} ms`,
    );

    // With the default heartbeat, every retry while the handler ran was a 409, the last well
    // past the lease; the handler's own answer is the key's.
    expect(kept.attempts.map((a) => a.status)).toEqual([409, 409, 409, 409]);
    expect(kept.attempts[3].atMs).toBeGreaterThan(6000);
    expect(kept.answer.status).toBe(201);
    expect(kept.answer.headers['idempotent-replayed']).toBeUndefined();
    const replay = await post(app, kept.body);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.body).toEqual(kept.answer.body);
    expect(await rows(kept.body.tag)).toBe(1);

    // Without it, the lease ran out under the live handler: a retry took the key over and
    // ran the work, and the slow worker's commit was fenced off (409 lease_lost).
    expect(lost.attempts[lost.attempts.length - 1].status).toBe(201);
    expect(lost.answer.status).toBe(409);
    expect(lost.answer.body.code).toBe('lease_lost');
    expect(await rows(lost.body.tag)).toBe(1);
  });

  describe('a renewal still on its way when the key is given back', () => {
    let slowPath: DataSource;
    let slow: INestApplication;
    beforeAll(async () => {
      slowPath = new DataSource({ type: 'postgres', url: database.url });
      await slowPath.initialize();
      const store = new SlowHeartbeatStore(new IdempotencyDatabase(() => slowPath, 5000), 400);
      // A 600 ms lease is renewed every 200 ms; each renewal lands 400 ms after it started.
      slow = await createAtomicApp({
        databaseUrl: database.url,
        adapter,
        idempotency: { leaseMs: 600, claimStores: { slow: store }, claimStore: 'slow' },
      });
    });
    afterAll(async () => {
      await slow?.close();
      await slowPath?.destroy();
    });

    it('does not extend the lease it gave back: the retry after the 503 runs at once', async () => {
      // Fails after 300 ms, while the renewal that started at 200 ms is on its way.
      const body: LedgerBody = { tag: tag('beat'), delayMs: 300, failFirst: 'retry-later' };
      const first = await post(slow, body);
      expect(first.status).toBe(503);
      expect(first.body.code).toBe('retry_later');
      await sleep(500); // past that renewal's landing
      const retry = await post(slow, body);
      expect({ status: retry.status, code: retry.body.code as unknown }).toEqual({
        status: 201,
        code: undefined,
      });
      expect(await rows(body.tag)).toBe(1);
    });
  });
});
