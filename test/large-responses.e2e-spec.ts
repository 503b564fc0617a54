import { randomBytes } from 'node:crypto';
import request from 'supertest';
import { type DataSource } from 'typeorm';
import { decide } from '../lib/decisions/decide.js';
import { describeClaimStoreContract } from '../lib/testing/index.js';
import { PointingClaimStore } from '../lib/answer/bodies/pointing-claim.store.js';
import { PostgresBodyStore } from '../lib/answer/bodies/postgres-body.store.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { PostgresClaimStore } from '../lib/claim/postgres-claim.store.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { type Scenario, startScenario } from './support/scenario.js';
import { ADAPTERS } from './support/test-app.js';

/**
 * Large responses by pointer: the key's row keeps the body's id, length and SHA-256, the
 * body lives in `idempotency_response_bodies`, written in the transaction of the finish. Every
 * replay reads PostgreSQL (no replay cache), and a body that is missing or altered is a 500
 * that says which, never a wrong body.
 */
describe.each(ADAPTERS)('large responses by pointer on %s', (adapter) => {
  let s: Scenario;
  let n = 0;
  const newKey = () => `large-${adapter}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    s = await startScenario('large_responses', adapter, {
      largeResponses: { overBytes: 1024 },
      replayCacheSize: 0,
    });
  });
  afterAll(async () => {
    await s?.close();
  });

  const order = (idempotencyKey: string, note: string) =>
    request(s.server())
      .post('/orders')
      .set('Idempotency-Key', idempotencyKey)
      .set('X-Tenant-Id', '1')
      .send({ amount: 5, note });
  const rowOf = async (key: string) =>
    (
      await s.db.query<{ response_body: Buffer; response_headers: Record<string, string> }>(
        'SELECT response_body, response_headers FROM idempotency_keys WHERE key = $1',
        [key],
      )
    ).rows[0];
  const bodiesOf = async (key: string) =>
    (
      await s.db.query<{ id: string; body: Buffer }>(
        'SELECT id, body FROM idempotency_response_bodies WHERE key = $1',
        [key],
      )
    ).rows;

  it('keeps a large body apart, with its length and SHA-256, and replays it byte for byte', async () => {
    const k = newKey();
    const note = randomBytes(3000).toString('hex');
    const first = await order(k, note);
    expect(first.status).toBe(201);
    const row = await rowOf(k);
    expect(row.response_body.length).toBe(0);
    const pointer = JSON.parse(row.response_headers.$body) as Record<string, unknown>;
    const [stored] = await bodiesOf(k);
    expect(pointer).toEqual({
      id: stored.id,
      length: Buffer.byteLength(first.text),
      sha256: expect.stringMatching(/^[0-9a-f]{64}$/),
    });
    expect(stored.body.toString()).toBe(first.text);
    const again = await order(k, note);
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.headers['content-type']).toBe(first.headers['content-type']);
    expect(again.text).toBe(first.text);
  });

  it('keeps a small body inline', async () => {
    const k = newKey();
    expect((await order(k, 'short')).status).toBe(201);
    expect((await rowOf(k)).response_body.length).toBeGreaterThan(0);
    expect(await bodiesOf(k)).toEqual([]);
  });

  it.each([
    [
      'missing',
      'DELETE FROM idempotency_response_bodies WHERE key = $1',
      /^The stored response of this idempotency key cannot be read: its body \([0-9a-f-]{36}\) is missing from the body store\.$/,
    ],
    [
      'cut short',
      'UPDATE idempotency_response_bodies SET body = substring(body from 2) WHERE key = $1',
      /cannot be read: its body \([0-9a-f-]{36}\) is \d+ bytes, not the \d+ stored\.$/,
    ],
    [
      'altered, its length kept',
      `UPDATE idempotency_response_bodies SET body = overlay(body placing 'Z'::bytea from 20) WHERE key = $1`,
      /cannot be read: its body \([0-9a-f-]{36}\) does not match the SHA-256 stored with the key\.$/,
    ],
  ])(
    'answers 500 stored_response_unreadable for a body %s, never a wrong body',
    async (_what, sql, detail) => {
      const k = newKey();
      const note = randomBytes(3000).toString('hex');
      expect((await order(k, note)).status).toBe(201);
      for (const statement of sql.split(';').filter((part) => part.trim())) {
        await s.db.query(statement, [k]);
      }
      const res = await order(k, note);
      expect(res.status).toBe(500);
      expect(res.headers['content-type']).toContain('application/problem+json');
      expect(res.body).toMatchObject({ code: 'stored_response_unreadable', status: 500 });
      expect(res.body.detail).toMatch(detail);
      expect(res.text).not.toContain(note.slice(0, 40));
    },
  );

  it('purges a body with its key', async () => {
    const k = newKey();
    expect((await order(k, randomBytes(3000).toString('hex'))).status).toBe(201);
    await s.db.query(
      `UPDATE idempotency_keys SET created_at = now() - interval '2 days',
       finished_at = now() - interval '2 days' WHERE key = $1`,
      [k],
    );
    await s.db.query(
      `UPDATE idempotency_response_bodies SET created_at = now() - interval '2 days' WHERE key = $1`,
      [k],
    );
    const purger = s.app.get((await import('../lib/index.js')).IdempotencyPurger);
    await purger.purgeExpired();
    expect(await rowOf(k)).toBeUndefined();
    expect(await bodiesOf(k)).toEqual([]);
  });
});

describe('bodies by pointer in the store', () => {
  let database: MigratedDatabase;
  let dataSource: DataSource;
  let db: IdempotencyDatabase;
  beforeAll(async () => {
    database = await createMigratedDatabase('pointer_store');
    dataSource = database.dataSource;
    db = new IdempotencyDatabase(() => dataSource, 5000);
  });
  afterAll(async () => {
    await database?.drop();
  });
  const pointing = (overBytes: number) =>
    new PointingClaimStore(new PostgresClaimStore(db), new PostgresBodyStore(db), overBytes);

  it('writes no body when the finish is fenced off: a key never points at nothing, nor a body at no key', async () => {
    const store = pointing(8);
    const scope = { tenantId: '1', key: `fenced-${Date.now()}` };
    const fp = Buffer.alloc(32, 1);
    const first = await store.claim(scope, fp, 100);
    if (first.kind !== 'claimed') throw new Error('expected a claim');
    await new Promise((resolve) => setTimeout(resolve, 250));
    const seen = await store.claim(scope, fp, 60_000);
    if (seen.kind !== 'existing') throw new Error('expected the record');
    const decision = decide(seen.existing, fp);
    if (decision.kind !== 'take-over') throw new Error('expected a takeover');
    expect(await store.takeOver(scope, decision.fence, 60_000)).toBeDefined();
    const transaction = db.transaction(false);
    const response = { status: 201, headers: {}, body: Buffer.from('x'.repeat(100)) };
    expect(await store.finishIn(first.claim, response, transaction)).toBe(false);
    const { rows } = await dataSource
      .query('SELECT count(*)::int AS n FROM idempotency_response_bodies WHERE key = $1', [
        scope.key,
      ])
      .then((r: { n: number }[]) => ({ rows: r }));
    expect(rows[0].n).toBe(0);
  });

  describe('keeps the contract', () => {
    // Every response of the contract's cases is over 1 byte: all go by pointer.
    describeClaimStoreContract('postgres, bodies by pointer', {
      create: () => pointing(1),
    });
  });
});
