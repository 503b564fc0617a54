import pg from 'pg';
import request from 'supertest';
import { ReplayCache } from '../lib/answer/replay-cache.js';
import { ClaimStores } from '../lib/claim-stores.js';
import { PostgresClaimStore } from '../lib/claim/postgres-claim.store.js';
import { ADAPTERS } from './support/test-app.js';
import { type Scenario, startScenario } from './support/scenario.js';

/**
 * Counts the SQL statements the app sends while one request is served, at the pg client
 * (each call is one round trip), so that an extra round trip on the hot path fails here.
 */
describe.each(ADAPTERS)('statements per request on %s', (adapter) => {
  let s: Scenario;
  let statements: string[] = [];
  /** Statements that committed: `COMMIT`, and any statement sent outside a transaction. */
  let commits = 0;
  /** Statements sent with the COMMIT in their round trip, by name. */
  let committedWith: string[] = [];
  const inTransaction = new WeakSet<pg.Client>();
  const originalQuery = pg.Client.prototype.query;

  beforeAll(async () => {
    s = await startScenario('statements', adapter);
    const test = s.db;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      // The test's own client does not count.
      if (this !== test) {
        const config = args[0] as string | { text?: string; name?: string; begin?: string };
        const text = typeof config === 'string' ? config : (config.text ?? '');
        const name = typeof config === 'string' ? '' : (config.name ?? '');
        // A transaction's first statement carries its BEGIN in the same round trip.
        const begin = typeof config === 'string' ? undefined : config.begin;
        statements.push(begin ? `${begin}; ${text}` : text);
        if (begin) inTransaction.add(this);
        // The library's last statement of a transaction carries the COMMIT in its round trip.
        const withCommit = name.endsWith('_commit');
        if (/^(BEGIN|START TRANSACTION)/i.test(text)) inTransaction.add(this);
        else if (withCommit || /^(COMMIT|ROLLBACK)/i.test(text)) {
          inTransaction.delete(this);
          if (withCommit || /^COMMIT/i.test(text)) commits++;
        } else if (!inTransaction.has(this)) commits++;
        if (withCommit) committedWith.push(name);
      }
      return (originalQuery as (...a: unknown[]) => unknown).apply(this, args);
    } as typeof pg.Client.prototype.query;
  });
  afterAll(async () => {
    pg.Client.prototype.query = originalQuery;
    await s?.close();
  });

  const send = (key: string) =>
    request(s.server()).post('/noop').set('Idempotency-Key', key).set('X-Tenant-Id', '1').send({});

  const reset = () => {
    statements = [];
    commits = 0;
    committedWith = [];
  };

  /** Forgets what this process remembers of a key: a retry that lands on another instance. */
  const elsewhere = (key: string) => s.app.get(ReplayCache).delete('1', key);

  it('costs two statements for a new key (claim, then finish), one for a replay, none for a replay from memory', async () => {
    const key = `count-${adapter}`;
    await send('warm-up'); // the pool's first connection is opened outside the count
    reset();
    const first = await send(key);
    expect(first.status).toBe(201);
    expect(statements).toHaveLength(2);
    expect(statements[0]).toContain('INSERT INTO idempotency_keys');
    expect(statements[1]).toContain("SET state = 'done'");
    expect(commits).toBe(2);

    reset();
    const fromMemory = await send(key);
    expect(fromMemory.headers['idempotent-replayed']).toBe('true');
    expect(fromMemory.text).toBe(first.text);
    expect(statements).toHaveLength(0);

    elsewhere(key);
    reset();
    const replay = await send(key);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.text).toBe(first.text);
    expect(statements).toHaveLength(1);
  });

  it('commits a writing handler’s effects and its response together: two commits in all', async () => {
    const key = `count-write-${adapter}`;
    reset();
    const first = await request(s.server())
      .post('/orders')
      .set('Idempotency-Key', key)
      .set('X-Tenant-Id', '1')
      .send({ amount: 3 });
    expect(first.status).toBe(201);
    // Three round trips: the claim, BEGIN with the handler's INSERT, and the stored response
    // sent with the COMMIT.
    expect(statements).toHaveLength(3);
    expect(statements[0]).toContain('INSERT INTO idempotency_keys');
    expect(statements[1]).toMatch(
      /^BEGIN ISOLATION LEVEL READ COMMITTED; INSERT INTO "?side_effects/,
    );
    expect(statements[2]).toContain("SET state = 'done'");
    expect(committedWith).toEqual(['idempotency_complete_v3_commit']);
    expect(commits).toBe(2);
  });

  it('costs one statement for a 422 and one for a 409', async () => {
    const key = `count-conflict-${adapter}`;
    await send(key);
    elsewhere(key);
    reset();
    const mismatch = await request(s.server())
      .post('/noop')
      .set('Idempotency-Key', key)
      .set('X-Tenant-Id', '1')
      .send({ other: true });
    expect(mismatch.status).toBe(422);
    expect(statements).toHaveLength(1);

    // A key another worker holds, its lease valid.
    const held = `count-held-${adapter}`;
    await s.db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
       SELECT 1, $1, fingerprint, now() + interval '1 minute' FROM idempotency_keys WHERE key = $2`,
      [held, key],
    );
    reset();
    const conflict = await send(held);
    expect(conflict.status).toBe(409);
    expect(statements).toHaveLength(1);
    expect(commits).toBe(1);
  });

  /** The app's PostgreSQL store, under its layers (sealing, bodies by pointer). */
  const postgresStore = (): PostgresClaimStore => {
    let store: unknown = s.app.get(ClaimStores).get('postgres');
    while (!(store instanceof PostgresClaimStore)) store = (store as { inner: unknown }).inner;
    return store;
  };

  /**
   * Sends `keys` while a claim is on its way to PostgreSQL (held there by the test's own
   * uncommitted row of its key), and lets it go once all of them wait behind it.
   */
  async function whileOneClaimIsOnItsWay(keys: string[]) {
    const blocker = `count-blocker-${adapter}-${keys[0]}`;
    await s.db.query('BEGIN');
    await s.db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint) VALUES ('1', $1, '\\x00')`,
      [blocker],
    );
    const first = send(blocker).then((r) => r);
    const batcher = postgresStore().batcher;
    // The lone claim is on its way (it waits on the test's row) before the others are sent.
    await waitFor(async () => {
      // pg_stat_activity is read once per transaction (the test's is open) unless cleared.
      await s.db.query('SELECT pg_stat_clear_snapshot()');
      const { rows } = await s.db.query<{ n: number }>(
        `SELECT count(*)::int AS n FROM pg_stat_activity
         WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%INSERT INTO idempotency_keys%'`,
      );
      return rows[0].n === 1;
    });
    const rest = keys.map((key) => send(key).then((r) => r));
    await waitFor(() => batcher.waiting === keys.length);
    await s.db.query('ROLLBACK');
    return [await first, ...(await Promise.all(rest))];
  }

  it('costs one claim statement for all the new keys that arrive while a claim is on its way', async () => {
    const keys = Array.from({ length: 12 }, (_, i) => `count-many-${adapter}-${i}`);
    reset();
    const answers = await whileOneClaimIsOnItsWay(keys);
    expect(answers.map((r) => r.status)).toEqual(Array(13).fill(201));
    const claims = statements.filter((text) => text.includes('INSERT INTO idempotency_keys'));
    // The lone claim, then one statement for the 12 that waited for it.
    expect(claims).toHaveLength(2);
    expect(claims[1]).toContain('unnest(');
    // Each request's own finish: 2 + 13 statements for 13 new keys, 15 commits.
    expect(statements.filter((text) => text.includes("SET state = 'done'"))).toHaveLength(13);
    expect(statements).toHaveLength(15);
    expect(commits).toBe(15);
  });

  it('costs one statement for all the replays that miss the cache while a claim is on its way', async () => {
    const keys = Array.from({ length: 12 }, (_, i) => `count-replays-${adapter}-${i}`);
    const firsts = await Promise.all(keys.map((key) => send(key)));
    for (const key of keys) elsewhere(key);
    reset();
    const answers = await whileOneClaimIsOnItsWay(keys);
    for (const [i, replay] of answers.slice(1).entries()) {
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(replay.text).toBe(firsts[i].text);
    }
    // The lone claim and its finish, then one statement for the 12 replays.
    expect(statements).toHaveLength(3);
    expect(statements.filter((text) => text.includes('unnest('))).toHaveLength(1);
  });
});

async function waitFor(condition: () => boolean | Promise<boolean>, timeoutMs = 10_000) {
  const until = Date.now() + timeoutMs;
  while (!(await condition())) {
    if (Date.now() > until) throw new Error('the condition was not met in time');
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}
