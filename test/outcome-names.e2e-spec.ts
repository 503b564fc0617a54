import { type INestApplication } from '@nestjs/common';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Client } from 'pg';
import request from 'supertest';
import { IDEMPOTENCY_CHANNELS } from '../lib/index.js';
import { createAtomicApp, LEDGER_DDL, type LedgerBody } from './support/atomic-app.js';
import { ADAPTERS } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/**
 * Outcomes named for what happened. A key given back without its answer (the handler threw
 * `RetryLaterError`, a transient database failure) and taken up by its retry is resumed; only
 * an expired lease, whose worker stopped renewing it (a crash), is taken over. An alert on
 * `taken_over` must not fire whenever a downstream system is down.
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const WATCHED = ['claimed', 'takenOver', 'resumed', 'released', 'leaseLost', 'stored'] as const;

let database: TestDatabase;
let db: Client;
beforeAll(async () => {
  database = await createTestDatabase('outcome_names');
  db = new Client({ connectionString: database.url });
  await db.connect();
  await db.query(LEDGER_DDL);
});
afterAll(async () => {
  await db?.end();
  await database?.drop();
});

describe.each(ADAPTERS)('outcome names on %s', (adapter) => {
  let app: INestApplication;
  /** A lease shorter than the slow request, never renewed: the stand-in for a dead worker. */
  let stalled: INestApplication;
  let n = 0;
  const tag = (label: string) => `${label}-${adapter}-${++n}-${Date.now()}`;
  const seen: { channel: string; key: string }[] = [];
  const listeners = WATCHED.filter((name) => name in IDEMPOTENCY_CHANNELS).map((name) => {
    const channel = (IDEMPOTENCY_CHANNELS as Record<string, string>)[name];
    const listener = (event: unknown) =>
      seen.push({ channel: name, key: (event as { key: string }).key });
    return [channel, listener] as const;
  });

  beforeAll(async () => {
    app = await createAtomicApp({ databaseUrl: database.url, adapter });
    stalled = await createAtomicApp({
      databaseUrl: database.url,
      adapter,
      idempotency: { leaseMs: 500, heartbeat: false },
    });
    for (const [channel, listener] of listeners) subscribe(channel, listener);
  });
  afterAll(async () => {
    for (const [channel, listener] of listeners) unsubscribe(channel, listener);
    await Promise.all([app, stalled].map((instance) => instance?.close()));
  });

  const post = (target: INestApplication, body: LedgerBody) =>
    request(target.getHttpServer()).post('/ledger').set('Idempotency-Key', body.tag).send(body);
  const outcomesOf = (key: string) => seen.filter((e) => e.key === key).map((e) => e.channel);

  it.each([['retry-later' as const], ['statement-timeout' as const]])(
    'names the retry of a key given back after %s resumed, not taken over',
    async (failFirst) => {
      const body: LedgerBody = { tag: tag(failFirst), failFirst };
      const first = await post(app, body);
      expect(first.status).toBe(503);
      const retry = await post(app, body);
      expect(retry.status).toBe(201);
      expect(outcomesOf(body.tag)).toEqual(['claimed', 'released', 'resumed', 'stored']);
    },
    30_000,
  );

  it('names the retry that finds an expired lease (its worker stopped renewing it) taken over', async () => {
    const body: LedgerBody = { tag: tag('expired'), delayMs: 1500 };
    const first = post(stalled, body).then((r) => r);
    await sleep(1000); // past the 500 ms lease, the first request still running
    const retry = await post(stalled, body);
    expect(retry.status).toBe(201);
    expect((await first).status).toBe(409);
    expect((await first).body.code).toBe('lease_lost');
    // The stale worker hears of its loss at its commit, before or after the retry stores.
    expect(outcomesOf(body.tag).sort()).toEqual(['claimed', 'leaseLost', 'stored', 'takenOver']);
  }, 30_000);
});
