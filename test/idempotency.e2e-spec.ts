import { request as httpRequest } from 'node:http';
import { type AddressInfo } from 'node:net';
import request from 'supertest';
import { ADAPTERS } from './support/test-app.js';
import { type Scenario, startScenario } from './support/scenario.js';

const PROBLEM = 'application/problem+json';

describe.each(ADAPTERS)('idempotent routes on %s', (adapter) => {
  let s: Scenario;
  let n = 0;
  /** A fresh key per test, so tests share the app but never a key. */
  const newKey = () => `key-${adapter}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    s = await startScenario('core', adapter);
  });
  afterAll(async () => {
    await s?.close();
  });

  const post = (path: string, key?: string, tenant = '1') => {
    const req = request(s.server()).post(path).set('X-Tenant-Id', tenant);
    return key === undefined ? req : req.set('Idempotency-Key', key);
  };

  it('runs a new key once and replays the stored response byte for byte', async () => {
    const key = newKey();
    const first = await post('/orders', key).send({ amount: 100, note: 'first' });
    expect(first.status).toBe(201);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(first.headers['content-type']).toMatch(/^application\/json/);

    const again = await post('/orders', key).send({ amount: 100, note: 'first' });
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.headers['content-type']).toBe(first.headers['content-type']);
    expect(again.text).toBe(first.text);
    expect(await s.sideEffects('orders')).toBe(1);
  });

  it('takes the structured-field form "K" as the same key as K', async () => {
    const key = newKey();
    const first = await post('/orders', `"${key}"`).send({ amount: 7 });
    const again = await post('/orders', key).send({ amount: 7 });
    expect(first.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.text).toBe(first.text);
  });

  it('treats key order, white space and number spelling as the same request', async () => {
    const key = newKey();
    const before = await s.sideEffects('orders');
    const first = await post('/orders', key)
      .set('Content-Type', 'application/json')
      .send('{"amount":1,"note":"same"}');
    const again = await post('/orders', key)
      .set('Content-Type', 'application/json')
      .send('{ "note" : "same",\n  "amount" : 1.0e0 }');
    expect(first.status).toBe(201);
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.text).toBe(first.text);
    expect(await s.sideEffects('orders')).toBe(before + 1);
  });

  it('answers 422 when the key is reused with another body or another path', async () => {
    const key = newKey();
    expect((await post('/orders', key).send({ amount: 5 })).status).toBe(201);
    const otherBody = await post('/orders', key).send({ amount: 6 });
    expect(otherBody.status).toBe(422);
    expect(otherBody.headers['content-type']).toMatch(PROBLEM);
    expect(otherBody.body).toMatchObject({ status: 422, code: 'key_mismatch' });
    expect(otherBody.body.detail).toContain('different request');
    const otherPath = await post('/accounts/a1/deposits', key).send({ amount: 5 });
    expect(otherPath.status).toBe(422);
  });

  it.each([
    ['missing', undefined, 'The Idempotency-Key header is required on this route'],
    ['empty', '', 'it is empty'],
    ['too long', 'k'.repeat(256), 'longer than 255 characters'],
    ['not visible ASCII', 'caf\u00e9-key', 'visible ASCII'],
    ['with a space', 'a b', 'visible ASCII'],
    ['badly quoted', '"a"b"', 'not a valid quoted string'],
  ])('answers 400 for a key that is %s, and runs nothing', async (_name, key, message) => {
    const before = await s.sideEffects();
    const res = await post('/orders', key).send({ amount: 1 });
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toMatch(PROBLEM);
    expect(res.body.code).toBe(key === undefined ? 'key_missing' : 'key_invalid');
    expect(res.body.detail).toContain(message);
    expect(await s.sideEffects()).toBe(before);
  });

  it('stores nothing when validation fails before the handler: the key then works', async () => {
    const key = newKey();
    const invalid = await post('/orders', key).send({ amount: -1 });
    expect(invalid.status).toBe(400);
    expect(invalid.text).toContain('amount must be a positive integer');
    const { rows } = await s.db.query('SELECT 1 FROM idempotency_keys WHERE key = $1', [key]);
    expect(rows).toHaveLength(0);

    const fixed = await post('/orders', key).send({ amount: 3 });
    expect(fixed.status).toBe(201);
    expect(fixed.headers['idempotent-replayed']).toBeUndefined();
    expect(fixed.body.amount).toBe(3);
  });

  it('stores nothing for a malformed JSON body: the key then works', async () => {
    const key = newKey();
    const malformed = await post('/orders', key)
      .set('Content-Type', 'application/json')
      .send('{"amount": 3');
    expect(malformed.status).toBe(400);
    const fixed = await post('/orders', key).send({ amount: 3 });
    expect(fixed.status).toBe(201);
    expect(fixed.headers['idempotent-replayed']).toBeUndefined();
  });

  it('stores the 500 of a handler that failed after starting, its effects rolled back, and replays it', async () => {
    const key = newKey();
    const first = await post('/crash', key).send({ amount: 1 });
    expect(first.status).toBe(500);
    const again = await post('/crash', key).send({ amount: 1 });
    expect(again.status).toBe(500);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.text).toBe(first.text);
    // The handler's write was in the request's transaction, which its error rolled back.
    expect(await s.sideEffects('crash')).toBe(0);
  });

  it('stores the status of @HttpCode() and the Location header, and replays them', async () => {
    const key = newKey();
    const first = await post('/accounts/acc-9/deposits', key).send({ amount: 10 });
    expect(first.status).toBe(202);
    expect(first.headers.location).toBe('/deposits/latest');
    const again = await post('/accounts/acc-9/deposits', key).send({ amount: 10 });
    expect(again.status).toBe(202);
    expect(again.headers.location).toBe('/deposits/latest');
    expect(again.text).toBe(first.text);
    expect(await s.sideEffects('deposit:acc-9')).toBe(1);
  });

  it('replays a text response with its content type', async () => {
    const key = newKey();
    const first = await post('/text', key);
    expect(first.status).toBe(201);
    const again = await post('/text', key);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.headers['content-type']).toBe(first.headers['content-type']);
    expect(again.text).toBe(first.text);
  });

  it('answers 500 response_too_large for a response over maxResponseBytes, its effects rolled back; that 500 is the stored answer', async () => {
    const key = newKey();
    const before = await s.sideEffects('sized');
    const first = await post('/sized', key).send({ size: 2000 });
    expect(first.status).toBe(500);
    expect(first.headers['content-type']).toMatch(PROBLEM);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    expect(first.body).toMatchObject({ code: 'response_too_large', status: 500 });
    expect(first.body.detail).toContain('1024 bytes');
    const again = await post('/sized', key).send({ size: 2000 });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.text).toBe(first.text);
    expect(await s.sideEffects('sized')).toBe(before);
    const small = newKey();
    const fits = await post('/sized', small).send({ size: 500 });
    expect(fits.status).toBe(201);
    const replay = await post('/sized', small).send({ size: 500 });
    expect(replay.headers['idempotent-replayed']).toBe('true');
    expect(replay.text).toBe(fits.text);
  });

  it('stores and replays the headers a route names in replayHeaders, and only those', async () => {
    const key = newKey();
    const first = await post('/costed', key);
    expect(first.status).toBe(201);
    expect(first.headers['x-request-cost']).toBe('7');
    const again = await post('/costed', key);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.headers['x-request-cost']).toBe('7');
    const stored = async (k: string) =>
      (
        await s.db.query<{ h: Record<string, string> }>(
          'SELECT response_headers AS h FROM idempotency_keys WHERE key = $1',
          [k],
        )
      ).rows[0].h;
    expect((await stored(key))['x-request-cost']).toBe('7');
    const other = newKey();
    expect((await post('/orders', other).send({ amount: 1 })).status).toBe(201);
    expect(Object.keys(await stored(other))).toEqual(['content-type']);
  });

  it('scopes keys per tenant: the same key under two tenants is two operations', async () => {
    const key = newKey();
    const one = await post('/orders', key, '1').send({ amount: 50 });
    const two = await post('/orders', key, '2').send({ amount: 50 });
    expect(one.status).toBe(201);
    expect(two.status).toBe(201);
    expect(two.headers['idempotent-replayed']).toBeUndefined();
    expect(two.body.id).not.toBe(one.body.id);
    const twoAgain = await post('/orders', key, '2').send({ amount: 50 });
    expect(twoAgain.text).toBe(two.text);
  });

  it('takes string and UUID tenants, each a key space of its own, 042 apart from 42', async () => {
    const key = newKey();
    const tenants = ['0b6c7c2e-7d1b-4c39-9f4e-2f1d0a9b8c7d', 'acme-corp', '42', '042'];
    const answers = [];
    for (const tenant of tenants)
      answers.push(await post('/orders', key, tenant).send({ amount: 3 }));
    expect(answers.map((res) => res.status)).toEqual([201, 201, 201, 201]);
    expect(new Set(answers.map((res) => res.body.id)).size).toBe(4);
    for (const [i, tenant] of tenants.entries()) {
      const again = await post('/orders', key, tenant).send({ amount: 3 });
      expect(again.headers['idempotent-replayed']).toBe('true');
      expect(again.text).toBe(answers[i].text);
    }
  });

  it.each([
    ['over 255 characters', 'x'.repeat(256)],
    ['only white space', '   '],
  ])('answers 400 tenant_invalid for a tenant id %s, and stores nothing', async (_name, tenant) => {
    const key = newKey();
    const res = await post('/orders', key, tenant).send({ amount: 1 });
    expect(res.status).toBe(400);
    expect(res.headers['content-type']).toMatch(PROBLEM);
    expect(res.body.code).toBe('tenant_invalid');
    const { rows } = await s.db.query('SELECT 1 FROM idempotency_keys WHERE key = $1', [key]);
    expect(rows).toEqual([]);
  });

  it('answers 409 with Retry-After while another request holds the lease', async () => {
    const key = newKey();
    const slow = post('/orders', key).send({ amount: 9, delayMs: 1500 });
    const slowDone = slow.then((r) => r);
    await new Promise((resolve) => setTimeout(resolve, 400));
    const busy = await post('/orders', key).send({ amount: 9, delayMs: 1500 });
    expect(busy.status).toBe(409);
    expect(busy.headers['content-type']).toMatch(PROBLEM);
    expect(Number(busy.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    expect(busy.body.code).toBe('key_in_progress');
    expect((await slowDone).status).toBe(201);
  });

  it('distinguishes JSON numbers a JavaScript number cannot hold (raw-body fingerprint)', async () => {
    const key = newKey();
    const send = (amount: string) =>
      post('/orders', key).set('Content-Type', 'application/json').send(`{"amount":${amount}}`);
    expect((await send('1234567890123456789')).status).toBe(201);
    expect((await send('1234567890123456789.0')).headers['idempotent-replayed']).toBe('true');
    expect((await send('1234567890123456788')).status).toBe(422);
  });

  it('stores the response of a client that hung up mid-request; its retry replays it', async () => {
    const key = newKey();
    const before = await s.sideEffects('orders');
    const server = s.server() as { address(): AddressInfo | string | null };
    let port = (server.address() as AddressInfo | null)?.port;
    if (!port) {
      await new Promise<void>((resolve) => s.app.getHttpServer().listen(0, '127.0.0.1', resolve));
      port = (server.address() as AddressInfo).port;
    }
    const body = JSON.stringify({ amount: 77, delayMs: 600 });
    await new Promise<void>((resolve) => {
      const req = httpRequest({
        host: '127.0.0.1',
        port,
        method: 'POST',
        path: '/orders',
        headers: { 'content-type': 'application/json', 'idempotency-key': key, 'x-tenant-id': '1' },
      });
      req.on('error', () => resolve());
      req.end(body);
      setTimeout(() => {
        req.destroy();
        resolve();
      }, 150);
    });
    let row: { state: string } | undefined;
    for (let i = 0; i < 40; i++) {
      row = (await s.db.query('SELECT state FROM idempotency_keys WHERE key = $1', [key])).rows[0];
      if (row?.state === 'done') break;
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    expect(row?.state).toBe('done');
    const retry = await post('/orders', key).send({ amount: 77, delayMs: 600 });
    expect(retry.status).toBe(201);
    expect(retry.headers['idempotent-replayed']).toBe('true');
    expect(await s.sideEffects('orders')).toBe(before + 1);
  });

  it('after an outer timeout, stores the handler’s own answer when it settles, and runs it once', async () => {
    const key = newKey();
    const before = await s.sideEffects('timeout');
    const first = await post('/timeout', key).send({ delayMs: 600 });
    expect(first.status).toBe(408);
    expect(first.headers['idempotent-replayed']).toBeUndefined();
    // Not a stored 408: the handler is still running, in its transaction, under its lease.
    const retry = await post('/timeout', key).send({ delayMs: 600 });
    expect(retry.status).toBe(409);
    expect(retry.body.code).toBe('key_in_progress');
    const { rows } = await s.db.query('SELECT state FROM idempotency_keys WHERE key = $1', [key]);
    expect(rows).toEqual([{ state: 'started' }]);
    expect(await s.sideEffects('timeout')).toBe(before); // its write is not committed yet

    let replay: request.Response | undefined;
    for (let i = 0; i < 40 && replay?.status !== 201; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      replay = await post('/timeout', key).send({ delayMs: 600 });
    }
    expect(replay?.status).toBe(201);
    expect(replay?.headers['idempotent-replayed']).toBe('true');
    expect(replay?.headers['content-type']).toMatch(/^application\/json/);
    const [effect] = (
      await s.db.query<{ id: number }>(
        'SELECT id FROM side_effects WHERE route = $1 ORDER BY id DESC LIMIT 1',
        ['timeout'],
      )
    ).rows;
    expect(replay?.body).toEqual({ id: effect.id });
    expect(await s.sideEffects('timeout')).toBe(before + 1);
  });

  it('gives the key back, and never runs the handler, when an outer timeout fires in a pipe', async () => {
    const key = newKey();
    const first = await post('/timeout-in-pipe', key).send({ n: 1 });
    expect(first.status).toBe(408);
    const { rows } = await s.db.query('SELECT 1 FROM idempotency_keys WHERE key = $1', [key]);
    expect(rows).toHaveLength(0);
    await new Promise((resolve) => setTimeout(resolve, 700)); // the pipe has resolved by now
    expect(await s.sideEffects('timeout-in-pipe')).toBe(0);
  });

  it('replays a route that writes its own response with @Res()', async () => {
    const key = newKey();
    const first = await post('/own-response', key);
    expect(first.status).toBe(201);
    expect(first.body.wrote).toBe('itself');
    const again = await post('/own-response', key);
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.text).toBe(first.text);
    expect(await s.sideEffects('own-response')).toBe(1);
  });

  it('stores and replays a 204 without a body or a Content-Length', async () => {
    const key = newKey();
    const first = await post('/no-content', key);
    expect(first.status).toBe(204);
    const again = await post('/no-content', key);
    expect(again.status).toBe(204);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.headers['content-length']).toBeUndefined();
    expect(again.text).toBe('');
  });

  it('answers 400 for a JSON body with a duplicate key, which has no one meaning', async () => {
    const res = await post('/orders', newKey())
      .set('Content-Type', 'application/json')
      .send('{"amount": 1, "amount": 2}');
    expect(res.status).toBe(400);
    expect(res.body.code).toBe('request_invalid');
    expect(res.body.detail).toContain('Duplicate object key "amount"');
  });

  it('runs the handler exactly once for 40 concurrent requests with one key', async () => {
    const key = newKey();
    const before = await s.sideEffects('orders');
    const responses = await Promise.all(
      Array.from({ length: 40 }, () => post('/orders', key).send({ amount: 40, delayMs: 200 })),
    );
    expect(await s.sideEffects('orders')).toBe(before + 1);
    const executed = responses.filter(
      (r) => r.status === 201 && r.headers['idempotent-replayed'] === undefined,
    );
    expect(executed).toHaveLength(1);
    for (const r of responses) {
      if (r.status === 201) expect(r.text).toBe(executed[0].text);
      else {
        expect(r.status).toBe(409);
        expect(r.headers['retry-after']).toBeDefined();
      }
    }
  });

  it('runs a route with required: false without a key, every time', async () => {
    const before = await s.sideEffects('optional');
    expect((await post('/optional').send({})).status).toBe(201);
    expect((await post('/optional').send({})).status).toBe(201);
    expect(await s.sideEffects('optional')).toBe(before + 2);
  });

  it('leaves routes without @Idempotent() untouched', async () => {
    const key = newKey();
    const before = await s.sideEffects('plain');
    const one = await post('/plain', key).send({});
    const two = await post('/plain', key).send({});
    expect(two.headers['idempotent-replayed']).toBeUndefined();
    expect(two.body.id).not.toBe(one.body.id);
    expect(await s.sideEffects('plain')).toBe(before + 2);
  });
});
