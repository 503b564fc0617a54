import request from 'supertest';
import { type IdempotencyModuleBaseOptions, type IdempotencyRequest } from '../lib/index.js';
import { ADAPTERS } from './support/test-app.js';
import { type Scenario, startScenario } from './support/scenario.js';

const PROBLEM = 'application/problem+json';

/**
 * The app's tenant resolver maps an organisation (a header, as an API credential would) to
 * its id. Two of them end in a lone surrogate: different JavaScript strings that PostgreSQL
 * would both store as "acme\uFFFD", one tenant where the app has two.
 */
const ORGS: Record<string, string> = {
  high: 'acme\ud800',
  other: 'acme\udbff',
  low: 'acme\udc00',
  emoji: 'acme\ud83d\ude00',
  plain: 'acme',
};
const tenantOption = {
  tenant: (req: IdempotencyRequest) => ORGS[String(req.headers['x-org'])] ?? 'acme',
} as IdempotencyModuleBaseOptions;

describe.each(ADAPTERS)('tenant ids that are not well-formed Unicode on %s', (adapter) => {
  let s: Scenario;
  let n = 0;
  const newKey = () => `utf-${adapter}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    s = await startScenario('tenant_utf', adapter, tenantOption);
  });
  afterAll(async () => {
    await s?.close();
  });

  const post = (org: string, key: string, amount: number) =>
    request(s.server())
      .post('/orders')
      .set('X-Org', org)
      .set('Idempotency-Key', key)
      .send({ amount });
  const rowsOf = async (key: string) =>
    (await s.db.query('SELECT 1 FROM idempotency_keys WHERE key = $1', [key])).rowCount;

  it.each(['high', 'other', 'low'])(
    'answers 400 tenant_invalid for the org whose id holds a lone surrogate (%s), and stores nothing',
    async (org) => {
      const key = newKey();
      const before = await s.sideEffects('orders');
      const res = await post(org, key, 1);
      expect(res.status).toBe(400);
      expect(res.headers['content-type']).toMatch(PROBLEM);
      expect(res.body.code).toBe('tenant_invalid');
      expect(await rowsOf(key)).toBe(0);
      expect(await s.sideEffects('orders')).toBe(before);
    },
  );

  it('never gives one org the answer stored for another whose id differs only there', async () => {
    const key = newKey();
    const first = await post('high', key, 1);
    const second = await post('other', key, 1);
    expect([first.status, second.status]).toEqual([400, 400]);
    expect(second.headers['idempotent-replayed']).toBeUndefined();
    expect(second.body.code).toBe('tenant_invalid');
  });

  it('never runs both handlers for one key when the two orgs arrive in one batch', async () => {
    const key = newKey();
    const before = await s.sideEffects('orders');
    const answers = await Promise.all([post('high', key, 1), post('other', key, 1)]);
    expect(answers.map((res) => [res.status, res.body.code])).toEqual([
      [400, 'tenant_invalid'],
      [400, 'tenant_invalid'],
    ]);
    expect(await s.sideEffects('orders')).toBe(before);
  });

  it('keeps a well-formed id beyond the BMP (a surrogate pair) its own tenant', async () => {
    const key = newKey();
    const emoji = await post('emoji', key, 1);
    const plain = await post('plain', key, 1);
    expect([emoji.status, plain.status]).toEqual([201, 201]);
    expect(emoji.body.id).not.toBe(plain.body.id);
    const again = await post('emoji', key, 1);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.text).toBe(emoji.text);
  });
});
