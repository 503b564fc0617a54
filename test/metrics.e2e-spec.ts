import { Logger, type LoggerService } from '@nestjs/common';
import { metrics } from '@opentelemetry/api';
import {
  type DataPoint,
  type Histogram,
  MeterProvider,
  MetricReader,
  type ResourceMetrics,
} from '@opentelemetry/sdk-metrics';
import { channel } from 'node:diagnostics_channel';
import request from 'supertest';
import { IDEMPOTENCY_CHANNELS, IdempotencyPurger } from '../lib/index.js';
import { type Scenario, startScenario } from './support/scenario.js';

/** The SDK's reader, collected on demand: the metrics as an exporter would see them. */
class InMemoryReader extends MetricReader {
  protected onShutdown(): Promise<void> {
    return Promise.resolve();
  }
  protected onForceFlush(): Promise<void> {
    return Promise.resolve();
  }
}

type Points = DataPoint<number | Histogram>[];

function pointsOf(resource: ResourceMetrics, name: string): Points {
  for (const scope of resource.scopeMetrics) {
    for (const metric of scope.metrics) {
      if (metric.descriptor.name === name) return metric.dataPoints as Points;
    }
  }
  return [];
}

describe('OpenTelemetry metrics, on a real SDK reader', () => {
  let s: Scenario;
  const reader = new InMemoryReader();
  const provider = new MeterProvider({ readers: [reader] });
  const collect = async () => (await reader.collect()).resourceMetrics;
  const route = 'OrdersController.create';
  const post = (key: string, body: object) =>
    request(s.server())
      .post('/orders')
      .set('Idempotency-Key', key)
      .set('X-Tenant-Id', '4')
      .send(body);
  const count = (resource: ResourceMetrics, outcome: string, extra: Record<string, unknown> = {}) =>
    pointsOf(resource, 'idempotency.outcomes')
      .filter(
        ({ attributes }) =>
          attributes['idempotency.outcome'] === outcome &&
          attributes['idempotency.route'] === route &&
          Object.entries(extra).every(([name, value]) => attributes[name] === value),
      )
      .reduce((sum, point) => sum + (point.value as number), 0);

  beforeAll(async () => {
    s = await startScenario('metrics', 'express', { metrics: { meterProvider: provider } });
  });
  afterAll(async () => {
    await s?.close();
    await provider.shutdown();
  });

  it('counts outcomes by route, never by tenant or key, and times the library’s own work', async () => {
    await post('m-1', { amount: 1 }).expect(201);
    await post('m-1', { amount: 1 }).expect(201); // replayed from memory
    await post('m-1', { amount: 2 }).expect(422);
    await post('m-2', { amount: -1 }).expect(400); // the pipe refuses it: given back
    const resource = await collect();
    expect(count(resource, 'claimed')).toBe(2);
    expect(count(resource, 'stored', { 'http.response.status_code': 201 })).toBe(1);
    expect(count(resource, 'replayed', { 'idempotency.replay.source': 'memory' })).toBe(1);
    expect(count(resource, 'mismatch')).toBe(1);
    expect(count(resource, 'released', { 'idempotency.reason': 'before_handler' })).toBe(1);
    const attributes = pointsOf(resource, 'idempotency.outcomes').flatMap(({ attributes: a }) =>
      Object.values(a),
    );
    expect(attributes).not.toContain('4');
    expect(attributes).not.toContain('m-1');

    const durations = pointsOf(resource, 'idempotency.duration');
    const decide = durations.find(
      ({ attributes }) =>
        attributes['idempotency.step'] === 'decide' && attributes['idempotency.route'] === route,
    )!.value as Histogram;
    const store = durations.find(({ attributes }) => attributes['idempotency.step'] === 'store')!
      .value as Histogram;
    // Claimed twice, replayed once, mismatched once; one answer stored.
    expect(decide.count).toBe(4);
    expect(store.count).toBe(1);
    expect(store.min).toBeGreaterThan(0);
  });

  it('reports the age of the oldest unfinished key, and 0 when none is', async () => {
    const age = async () =>
      pointsOf(await collect(), 'idempotency.oldest_unfinished_key.age')[0]?.value as number;
    expect(await age()).toBe(0);
    // A worker that crashed ten minutes ago, leaving its key unfinished.
    await s.db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until, created_at)
       VALUES ('4', 'm-crashed', '\\x00', now() - interval '9 minutes', now() - interval '10 minutes')`,
    );
    // And one given back on purpose (a 503 to retry) a day ago, whose client never retried:
    // not held by anyone, so not what the gauge is watched for.
    await s.db.query(
      `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until, created_at)
       VALUES ('4', 'm-given-back', '\\x00', NULL, now() - interval '1 day')`,
    );
    const seconds = await age();
    expect(seconds).toBeGreaterThanOrEqual(600);
    expect(seconds).toBeLessThan(660);
    await s.db.query(`DELETE FROM idempotency_keys WHERE key IN ('m-crashed', 'm-given-back')`);
  });

  it('counts the rows the purge deleted, by kind', async () => {
    await s.db.query(
      `UPDATE idempotency_keys SET finished_at = now() - interval '2 days',
         created_at = now() - interval '2 days' WHERE key = 'm-1'`,
    );
    await s.app.get(IdempotencyPurger).purgeExpired();
    const purged = pointsOf(await collect(), 'idempotency.purged');
    expect(
      purged.find(({ attributes }) => attributes['idempotency.purge.kind'] === 'finished')?.value,
    ).toBe(1);
  });
});

describe('metrics with no OpenTelemetry SDK, and the debug log', () => {
  let s: Scenario;
  const lines: string[] = [];
  const capture: LoggerService = {
    log: () => undefined,
    error: () => undefined,
    warn: () => undefined,
    debug: (message: unknown, context?: unknown) => {
      if (context === 'Idempotency') lines.push(String(message));
    },
  };

  afterEach(async () => {
    await s?.close();
    Logger.overrideLogger(false);
  });

  it('subscribes to nothing when no SDK registered a MeterProvider: the request path builds no event', async () => {
    metrics.disable(); // the API's no-op provider, as in an app without an SDK
    s = await startScenario('metrics_none', 'express');
    for (const name of Object.values(IDEMPOTENCY_CHANNELS)) {
      expect([name, channel(name).hasSubscribers]).toEqual([name, false]);
    }
  });

  it('uses the global MeterProvider an SDK registered before the app started', async () => {
    const reader = new InMemoryReader();
    const provider = new MeterProvider({ readers: [reader] });
    metrics.setGlobalMeterProvider(provider);
    try {
      s = await startScenario('metrics_global', 'express');
      await request(s.server()).post('/orders').set('Idempotency-Key', 'g-1').send({ amount: 1 });
      const claimed = pointsOf(
        (await reader.collect()).resourceMetrics,
        'idempotency.outcomes',
      ).find(({ attributes }) => attributes['idempotency.outcome'] === 'claimed');
      expect(claimed?.value).toBe(1);
    } finally {
      metrics.disable();
      await provider.shutdown();
    }
  });

  it('writes a debug line per event with debugEvents, naming the route, tenant and key', async () => {
    s = await startScenario('debug_events', 'express', { debugEvents: true, metrics: false });
    Logger.overrideLogger(capture);
    await request(s.server())
      .post('/orders')
      .set('Idempotency-Key', 'd-1')
      .set('X-Tenant-Id', '5')
      .send({ amount: 1 });
    await request(s.server())
      .post('/orders')
      .set('Idempotency-Key', 'd-1')
      .set('X-Tenant-Id', '5')
      .send({ amount: 1 });
    expect(lines.map((line) => line.replace(/durationMs=[\d.]+/, 'durationMs=T'))).toEqual([
      'idempotency:claimed route="OrdersController.create" tenant="5" key="d-1" durationMs=T',
      'idempotency:stored route="OrdersController.create" tenant="5" key="d-1" status=201 durationMs=T',
      'idempotency:replayed route="OrdersController.create" tenant="5" key="d-1" status=201 fromMemory=true durationMs=T',
    ]);
  });
});
