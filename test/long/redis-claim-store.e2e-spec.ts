import request from 'supertest';
import { type Redis } from 'ioredis';
import {
  IdempotencyContext,
  idempotencyStorage,
} from '../../lib/transaction/idempotency-context.js';
import { PhaseRunner, PhasesNeedTransactionalStoreError } from '../../lib/index.js';
import { RedisClaimStore } from '../../lib/redis/index.js';
import { IdempotencyDatabase } from '../../lib/data-layers/idempotency-database.js';
import { MemoryClaimStore } from '../../lib/testing/index.js';
import { createTestDatabase } from '../support/database.js';
import { createMigratedDatabase, type MigratedDatabase } from '../support/migrated-database.js';
import { PointingClaimStore } from '../../lib/answer/bodies/pointing-claim.store.js';
import { PostgresBodyStore } from '../../lib/answer/bodies/postgres-body.store.js';
import { redisServerInstalled, startTestRedis, type TestRedis } from '../support/redis-server.js';
import { type Scenario, startScenario } from '../support/scenario.js';
import { ADAPTERS, createTestApp } from '../support/test-app.js';

const onRedis = redisServerInstalled() || process.env.CI === 'true' ? describe : describe.skip;

/** What a client sees of an answer: everything but the date. */
function seen(response: request.Response) {
  return {
    status: response.status,
    type: response.headers['content-type'] as string | undefined,
    replayed: response.headers['idempotent-replayed'] as string | undefined,
    retryAfter: response.headers['retry-after'] as string | undefined,
    location: response.headers.location as string | undefined,
    body: response.text,
  };
}

onRedis.each(ADAPTERS)('the Redis claim store (%s)', (adapter) => {
  let redis: TestRedis;
  let client: Redis;
  let onRedisStore: Scenario;
  let onPostgres: Scenario;

  beforeAll(async () => {
    redis = await startTestRedis();
    client = redis.client();
    // No replay cache: a retry that reaches another instance of the app has none either.
    onRedisStore = await startScenario('redis_store', adapter, {
      claimStores: { redis: new RedisClaimStore(client) },
      claimStore: 'redis',
      atomic: false,
      replayCacheSize: 0,
    });
    onPostgres = await startScenario('redis_store_pg', adapter, {
      atomic: false,
      replayCacheSize: 0,
    });
  });
  afterAll(async () => {
    await onRedisStore?.close();
    await onPostgres?.close();
    await redis?.stop();
  });

  /** The same conversation with the app, as a client sees it. */
  async function conversation(s: Scenario) {
    const post = (path: string, key: string | undefined, body: object) => {
      const req = request(s.server()).post(path).set('X-Tenant-Id', '1');
      return (key === undefined ? req : req.set('Idempotency-Key', key)).send(body);
    };
    const answers = [
      await post('/orders', 'k1', { amount: 5 }),
      await post('/orders', 'k1', { amount: 5 }),
      await post('/orders', 'k1', { amount: 6 }),
      await post('/crash', 'k3', { amount: 1 }),
      await post('/crash', 'k3', { amount: 1 }),
      await post('/accounts/a/deposits', 'k4', { amount: 2 }),
      await post('/accounts/a/deposits', 'k4', { amount: 2 }),
      await post('/orders', undefined, { amount: 1 }),
      await post('/orders', 'bad key', { amount: 1 }),
    ];
    // Two requests of one key in flight: one runs, the other is told to come back.
    const [a, b] = await Promise.all([
      post('/orders', 'k2', { amount: 1, delayMs: 600 }),
      new Promise((resolve) => setTimeout(resolve, 150)).then(() =>
        post('/orders', 'k2', { amount: 1, delayMs: 600 }),
      ),
    ]);
    answers.push(a, b);
    return { answers: answers.map(seen), effects: await s.sideEffects() };
  }

  it('answers every request as the PostgreSQL store does: statuses, headers, bodies, replays', async () => {
    const fromRedis = await conversation(onRedisStore);
    const fromPostgres = await conversation(onPostgres);
    expect(fromRedis).toEqual(fromPostgres);
    // And what that is, so that two stores wrong the same way do not pass.
    expect(fromRedis.answers.map((answer) => [answer.status, answer.replayed])).toEqual([
      [201, undefined],
      [201, 'true'],
      [422, undefined],
      [500, undefined],
      [500, 'true'],
      [202, undefined],
      [202, 'true'],
      [400, undefined],
      [400, undefined],
      [201, undefined],
      [409, undefined],
    ]);
    expect(fromRedis.answers[10].retryAfter).toBeDefined();
    expect(fromRedis.effects).toBe(4);
    expect(await onRedisStore.db.query('SELECT 1 FROM idempotency_keys')).toHaveProperty(
      'rowCount',
      0,
    );
  });

  it('runs a handler twice when Redis restarts without persistence: the stated limit', async () => {
    const post = (s: Scenario) =>
      request(s.server())
        .post('/orders')
        .set('X-Tenant-Id', '1')
        .set('Idempotency-Key', 'across-restart')
        .send({ amount: 9 });
    for (const s of [onRedisStore, onPostgres]) expect((await post(s)).status).toBe(201);
    await redis.restart();
    const again = await post(onRedisStore);
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBeUndefined();
    const before = await onRedisStore.db.query(
      `SELECT count(*)::int AS n FROM side_effects WHERE amount = 9`,
    );
    expect(before.rows[0].n).toBe(2); // executed twice: the claim was lost with Redis's memory
    // The PostgreSQL store, asked the same after the same restart, replays.
    const replay = await post(onPostgres);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    const once = await onPostgres.db.query(
      `SELECT count(*)::int AS n FROM side_effects WHERE amount = 9`,
    );
    expect(once.rows[0].n).toBe(1);
  });
});

/**
 * The replay cache answers retries from memory; its entries must never outlive the store's own
 * retention of the key. Redis drops a finished key on its own (its TTL), while the module's
 * retention (24 h by default) says nothing of it: an entry kept by that one replayed, from
 * memory, a key Redis had long expired.
 */
onRedis.each(ADAPTERS)('the replay cache over the Redis store (%s)', (adapter) => {
  let redis: TestRedis;
  let s: Scenario;
  beforeAll(async () => {
    redis = await startTestRedis();
    s = await startScenario('redis_cache', adapter, {
      claimStores: { redis: new RedisClaimStore(redis.client(), { retentionMs: 600 }) },
      claimStore: 'redis',
      atomic: false,
      // The cache is on (its defaults: 60 s, 10,000 entries), and the module's retention is
      // its default, 24 h: only the store knows its keys go after 600 ms.
    });
  });
  afterAll(async () => {
    await s?.close();
    await redis?.stop();
  });
  const post = (key: string, amount: number) =>
    request(s.server())
      .post('/orders')
      .set('X-Tenant-Id', '1')
      .set('Idempotency-Key', key)
      .send({ amount });

  it('answers a key from memory no longer than Redis keeps it', async () => {
    const key = `cached-${Date.now()}`;
    expect((await post(key, 3)).status).toBe(201);
    const replay = await post(key, 3);
    expect([replay.status, replay.headers['idempotent-replayed']]).toEqual([201, 'true']);
    // Past the key's retention in Redis (600 ms), with a margin for a loaded machine.
    await new Promise((resolve) => setTimeout(resolve, 1500));
    expect(await redis.client().keys('idempotency:*')).toEqual([]);
    // The key is new again: the same request runs (not replayed), another one is not a 422.
    const again = await post(key, 3);
    expect([again.status, again.headers['idempotent-replayed']]).toEqual([201, undefined]);
    expect(await s.sideEffects()).toBe(2);
    await new Promise((resolve) => setTimeout(resolve, 1500));
    const other = await post(key, 4);
    expect([other.status, other.headers['idempotent-replayed']]).toEqual([201, undefined]);
    expect(await s.sideEffects()).toBe(3);
  });
});

/**
 * The Redis store's `timeoutMs` as the PostgreSQL store's: once the client was told 503
 * ("nothing was executed"), no claim of that request lands. A script waiting behind a paused
 * server, or in ioredis's offline queue while the server is down, would otherwise run when it
 * wakes, and hold the key for a lease: the retry got 409 for 30 s.
 */
onRedis.each(ADAPTERS)('the Redis store past its timeout (%s)', (adapter) => {
  let redis: TestRedis;
  let s: Scenario;
  let storeClient: Redis;
  const lease = 30_000;
  beforeAll(async () => {
    redis = await startTestRedis();
    // ioredis's own default: a command waits out 20 reconnections in its offline queue.
    storeClient = redis.client({ maxRetriesPerRequest: 20 });
    s = await startScenario('redis_timeout', adapter, {
      claimStores: { redis: new RedisClaimStore(storeClient, { timeoutMs: 2000 }) },
      claimStore: 'redis',
      atomic: false,
      leaseMs: lease,
      replayCacheSize: 0,
    });
  });
  afterAll(async () => {
    await s?.close();
    await redis?.stop();
  });
  const post = (key: string) =>
    request(s.server())
      .post('/orders')
      .set('X-Tenant-Id', '1')
      .set('Idempotency-Key', key)
      .send({ amount: 7 });
  const held = (key: string) => redis.client().exists(`idempotency:${JSON.stringify(['1', key])}`);
  const unavailable = {
    status: 503,
    code: 'store_unavailable',
    detail: 'The idempotency store is unavailable; nothing was executed. Retry later.',
  };
  const problem = (response: request.Response) => {
    const body = JSON.parse(response.text) as { status: number; code: string; detail: string };
    return { status: response.status, code: body.code, detail: body.detail };
  };

  it('leaves no claim behind a 503 when Redis was paused longer than the timeout', async () => {
    const key = `paused-${Date.now()}`;
    const paused = redis.pause(4000);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const first = await post(key);
    expect(problem(first)).toEqual(unavailable);
    await paused; // Redis ran what waited for it
    expect(await held(key)).toBe(0);
    const retry = await post(key);
    expect([retry.status, retry.headers['idempotent-replayed']]).toEqual([201, undefined]);
    expect(await s.sideEffects()).toBe(1);
  });

  it('leaves no claim behind a 503 when the claim waited in the offline queue', async () => {
    const key = `offline-${Date.now()}`;
    await redis.down();
    const first = await post(key);
    expect(problem(first)).toEqual(unavailable);
    await redis.up();
    // Queued after the claim: once it is answered, the client reconnected and Redis ran both.
    expect(await storeClient.ping()).toBe('PONG');
    expect(await held(key)).toBe(0);
    const retry = await post(key);
    expect([retry.status, retry.headers['idempotent-replayed']]).toEqual([201, undefined]);
    expect(await s.sideEffects()).toBe(2);
  });
});

describe('a claim store outside the database', () => {
  it('is refused at start-up on an atomic route, naming the route and the way out', async () => {
    const database = await createTestDatabase('redis_refused');
    try {
      await expect(
        createTestApp({
          databaseUrl: database.url,
          adapter: 'express',
          idempotency: { claimStores: { memory: new MemoryClaimStore() }, claimStore: 'memory' },
        }),
      ).rejects.toThrow(
        '@Idempotent() on OrdersController.create: claim store "memory" is not in the app\'s ' +
          "database, so the handler's effects cannot commit with its stored response (atomic, " +
          'the default); set atomic: false on the route to accept that a failure between them ' +
          'runs the handler again, or use claimStore: "postgres"',
      );
    } finally {
      await database.drop();
    }
  });

  it('is refused at start-up when no store has the name a route gives', async () => {
    const database = await createTestDatabase('redis_unknown');
    try {
      await expect(
        createTestApp({
          databaseUrl: database.url,
          adapter: 'express',
          idempotency: { claimStore: 'redis', atomic: false },
        }),
      ).rejects.toThrow(
        '@Idempotent() on OrdersController.create: no claim store is named "redis"; the ' +
          'module has "postgres" (add it to claimStores)',
      );
    } finally {
      await database.drop();
    }
  });

  it('refuses phases before any of their work runs', async () => {
    const store = new MemoryClaimStore();
    const outcome = await store.claim({ tenantId: '1', key: 'phases' }, Buffer.alloc(32), 60_000);
    if (outcome.kind !== 'claimed') throw new Error('expected a claim');
    const context = new IdempotencyContext(outcome.claim, 201, undefined, false, store);
    context.route = 'Payments.create';
    const phases = new PhaseRunner(undefined as unknown as IdempotencyDatabase);
    let ran = false;
    const work = () => {
      ran = true;
      return Promise.resolve(1);
    };
    for (const attempt of [() => phases.run('charge', work), () => phases.call('psp', work)]) {
      const error = await idempotencyStorage.run(context, attempt).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PhasesNeedTransactionalStoreError);
      expect((error as Error).message).toMatch(
        /^phase "(charge|psp)" of Payments\.create: phases commit their effects with their recovery point, which needs the claim store in the app's PostgreSQL; this route's claim store is not \(set claimStore: "postgres" on it\)$/,
      );
    }
    expect(ran).toBe(false);
  });
});

onRedis('the Redis claim store, on its own', () => {
  let redis: TestRedis;
  let database: MigratedDatabase;
  beforeAll(async () => {
    redis = await startTestRedis();
    database = await createMigratedDatabase('redis_bodies');
  });
  afterAll(async () => {
    await redis?.stop();
    await database?.drop();
  });
  const fp = Buffer.alloc(32, 3);
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it('never lets a held key expire, however long its lease or its heartbeat runs', async () => {
    const store = new RedisClaimStore(redis.client(), {
      retentionMs: 200,
      abandonedKeyRetentionMs: 200,
    });
    const scope = { tenantId: '1', key: `long-lease-${Date.now()}` };
    const outcome = await store.claim(scope, fp, 700);
    if (outcome.kind !== 'claimed') throw new Error('expected a claim');
    await sleep(500); // past the abandoned horizon, within the lease
    expect((await store.claim(scope, fp, 700)).kind).toBe('existing');
    for (let beat = 0; beat < 4; beat++) {
      await sleep(300);
      expect(await store.extendLease(outcome.claim)).toBe(true);
    }
    expect((await store.claim(scope, fp, 700)).kind).toBe('existing');
    expect(
      await store.finish(outcome.claim, { status: 201, headers: {}, body: Buffer.from('1') }),
    ).toBe(true);
    await sleep(400); // past the retention of a finished key: gone on its own
    expect((await store.claim(scope, fp, 700)).kind).toBe('claimed');
  });

  it('lands no takeover after its 503: a retry takes the key over once Redis is back', async () => {
    const store = new RedisClaimStore(redis.client(), { timeoutMs: 1000 });
    const scope = { tenantId: '1', key: `late-takeover-${Date.now()}` };
    const first = await store.claim(scope, fp, 100);
    if (first.kind !== 'claimed') throw new Error('expected a claim');
    await sleep(300); // its worker is gone: the lease has run out
    const expired = await store.claim(scope, fp, 100);
    if (expired.kind !== 'existing' || expired.existing.state !== 'started') {
      throw new Error('expected the expired claim');
    }
    // Its lease ran out (its worker is gone), rather than being given back.
    expect(expired.existing.released).toBe(false);
    const paused = redis.pause(2500);
    await sleep(100);
    await expect(store.takeOver(scope, expired.existing.fence, 30_000)).rejects.toThrow(
      'The idempotency store is unavailable; nothing was executed. Retry later.',
    );
    await paused;
    // The late takeover did nothing: the lease is still expired, and the retry wins it.
    const again = await store.claim(scope, fp, 100);
    if (again.kind !== 'existing' || again.existing.state !== 'started') {
      throw new Error('expected the unfinished claim');
    }
    expect(again.existing.leaseExpired).toBe(true);
    expect(again.existing.released).toBe(false);
    expect(await store.takeOver(scope, again.existing.fence, 30_000)).toMatchObject({
      lockVersion: '1',
    });
  });

  it('keeps a body stored by pointer as long as its Redis key, whatever the module purges', async () => {
    const db = new IdempotencyDatabase(() => database.dataSource, 5000);
    const bodies = new PostgresBodyStore(db);
    const store = new PointingClaimStore(
      new RedisClaimStore(redis.client(), { retentionMs: 800 }),
      bodies,
      1,
    );
    const scope = { tenantId: '1', key: `pointed-${Date.now()}` };
    const outcome = await store.claim(scope, fp, 200);
    if (outcome.kind !== 'claimed') throw new Error('expected a claim');
    const body = Buffer.from('x'.repeat(5000));
    expect(await store.finish(outcome.claim, { status: 201, headers: {}, body })).toBe(true);
    await sleep(300);
    // The module's retention is shorter than the Redis store's: the body must stay anyway.
    expect(await bodies.purgeBatch(100, 100)).toBe(0);
    const replay = await store.claim(scope, fp, 200);
    expect(
      replay.kind === 'existing' &&
        replay.existing.state === 'done' &&
        replay.existing.response.body.equals(body),
    ).toBe(true);
    await sleep(1000); // past the key's retention and the claim's lease
    expect(await bodies.purgeBatch(100, 100)).toBe(1);
  });
});
