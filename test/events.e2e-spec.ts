import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import request from 'supertest';
import { IDEMPOTENCY_CHANNELS, IdempotencyPurger } from '../lib/index.js';
import { type Scenario, startScenario } from './support/scenario.js';

/** Every outcome on its `node:diagnostics_channel` channel, with route, tenant and key. */
describe('events', () => {
  let s: Scenario;
  const seen: { channel: string; event: Record<string, unknown> }[] = [];
  const listeners = Object.values(IDEMPOTENCY_CHANNELS).map((name) => {
    const listener = (event: unknown) =>
      seen.push({ channel: name, event: event as Record<string, unknown> });
    return [name, listener] as const;
  });

  beforeAll(async () => {
    s = await startScenario('events', 'express');
    for (const [name, listener] of listeners) subscribe(name, listener);
  });
  afterAll(async () => {
    for (const [name, listener] of listeners) unsubscribe(name, listener);
    await s?.close();
  });

  const post = (path: string, key: string, body: object) =>
    request(s.server()).post(path).set('Idempotency-Key', key).set('X-Tenant-Id', '3').send(body);
  const take = () => seen.splice(0).map(({ channel, event }) => ({ channel, ...event }));
  const route = 'OrdersController.create';
  /** The library's own time: a number of milliseconds, under the test's own bound. */
  const ms = expect.any(Number) as unknown as number;

  it('publishes a claim and its stored answer, a replay from memory, a mismatch', async () => {
    seen.length = 0;
    await post('/orders', 'ev-1', { amount: 1 });
    expect(take()).toEqual([
      { channel: 'idempotency:claimed', route, tenant: '3', key: 'ev-1', durationMs: ms },
      {
        channel: 'idempotency:stored',
        route,
        tenant: '3',
        key: 'ev-1',
        status: 201,
        durationMs: ms,
      },
    ]);
    await post('/orders', 'ev-1', { amount: 1 });
    await post('/orders', 'ev-1', { amount: 2 });
    expect(take()).toEqual([
      {
        channel: 'idempotency:replayed',
        route,
        tenant: '3',
        key: 'ev-1',
        status: 201,
        fromMemory: true,
        durationMs: ms,
      },
      { channel: 'idempotency:mismatch', route, tenant: '3', key: 'ev-1', durationMs: ms },
    ]);
  });

  it('publishes a conflict, a stored error, and a key given back before its handler ran', async () => {
    seen.length = 0;
    const slow = post('/orders', 'ev-2', { amount: 1, delayMs: 500 }).then((res) => res);
    await new Promise((resolve) => setTimeout(resolve, 150));
    await post('/orders', 'ev-2', { amount: 1, delayMs: 500 });
    await slow;
    await post('/crash', 'ev-3', { amount: 1 });
    await post('/orders', 'ev-4', { amount: -1 }); // the pipe refuses it
    const events = take();
    expect(events).toContainEqual({
      channel: 'idempotency:conflict',
      route,
      tenant: '3',
      key: 'ev-2',
      durationMs: ms,
    });
    expect(events).toContainEqual({
      channel: 'idempotency:stored-error',
      route: 'OrdersController.crash',
      tenant: '3',
      key: 'ev-3',
      status: 500,
    });
    expect(events).toContainEqual({
      channel: 'idempotency:released',
      route,
      tenant: '3',
      key: 'ev-4',
      reason: 'before_handler',
    });
    // Never a body.
    expect(JSON.stringify(events)).not.toContain('amount');
    for (const event of events) {
      if ('durationMs' in event) expect(event.durationMs).toBeGreaterThanOrEqual(0);
      if ('durationMs' in event) expect(event.durationMs).toBeLessThan(5000);
    }
  });

  it('publishes what the purge deleted', async () => {
    seen.length = 0;
    await s.app.get(IdempotencyPurger).purgeExpired();
    expect(take()).toEqual([
      { channel: 'idempotency:purged', finished: 0, abandoned: 0, processedMessages: 0 },
    ]);
  });
});
