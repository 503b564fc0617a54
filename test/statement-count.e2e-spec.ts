import pg from 'pg';
import request from 'supertest';
import { ADAPTERS } from './support/test-app.js';
import { type Scenario, startScenario } from './support/scenario.js';

/**
 * Counts the SQL statements the app sends while one request is served, at the pg client
 * (each call is one round trip), so that an extra round trip on the hot path fails here.
 */
describe.each(ADAPTERS)('statements per request on %s', (adapter) => {
  let s: Scenario;
  let statements: string[] = [];
  const originalQuery = pg.Client.prototype.query;

  beforeAll(async () => {
    s = await startScenario('statements', adapter);
    const test = s.db;
    pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
      // The test's own client does not count.
      if (this !== test) {
        const config = args[0] as string | { text?: string };
        statements.push(typeof config === 'string' ? config : (config.text ?? ''));
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

  it('costs two statements for a new key (claim, then finish) and one for a replay', async () => {
    const key = `count-${adapter}`;
    await send('warm-up'); // the pool's first connection is opened outside the count
    statements = [];
    const first = await send(key);
    expect(first.status).toBe(201);
    expect(statements).toHaveLength(2);
    expect(statements[0]).toContain('INSERT INTO idempotency_keys');
    expect(statements[1]).toContain("SET state = 'done'");

    statements = [];
    const replay = await send(key);
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(statements).toHaveLength(1);
  });

  it('costs one statement for a 422 and one for a 409', async () => {
    const key = `count-conflict-${adapter}`;
    await send(key);
    statements = [];
    const mismatch = await request(s.server())
      .post('/noop')
      .set('Idempotency-Key', key)
      .set('X-Tenant-Id', '1')
      .send({ other: true });
    expect(mismatch.status).toBe(422);
    expect(statements).toHaveLength(1);
  });
});
