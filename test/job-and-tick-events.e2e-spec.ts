import 'reflect-metadata';
import { Injectable, Module, type INestApplicationContext } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { Interval, ScheduleModule } from '@nestjs/schedule';
import { DelayedError, type Job, Queue, QueueEvents } from 'bullmq';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { Pool } from 'pg';
import {
  IDEMPOTENCY_CHANNELS,
  IdempotencyModule,
  IdempotentJob,
  IdempotentTask,
} from '../lib/index.js';
import { keyKind, metricPoints } from '../lib/events/event-outcomes.js';
import { onRedis } from './support/job-queues.js';
import { createMigratedDatabase, type MigratedDatabase } from './support/migrated-database.js';
import { startTestRedis, type TestRedis } from './support/redis-server.js';

/**
 * What jobs and ticks tell an operator, on the library's channels (and so in its metrics):
 * a job's step is `jobStep` with its move, a duplicate job is a `replayed` of kind `job`; a
 * tick another replica runs or ran is `tickSkipped`, never `conflict` or `replayed` (which
 * would count once per other replica on every tick, and fire any alert on 409s).
 */
type Seen = { channel: string; event: Record<string, unknown> };

/** Every event published while `run` runs, in order. */
async function recording(run: (seen: Seen[]) => Promise<void>): Promise<Seen[]> {
  const seen: Seen[] = [];
  const listeners = Object.entries(IDEMPOTENCY_CHANNELS).map(([channel, id]) => {
    const listener = (event: unknown) =>
      seen.push({ channel, event: event as Record<string, unknown> });
    subscribe(id, listener);
    return () => unsubscribe(id, listener);
  });
  try {
    await run(seen);
  } finally {
    for (const stop of listeners) stop();
  }
  return seen;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

let database: MigratedDatabase;
let pool: Pool;

beforeAll(async () => {
  database = await createMigratedDatabase('job_tick_events');
  pool = new Pool({ connectionString: database.url, max: 6 });
}, 60_000);

afterAll(async () => {
  await pool?.end();
  await database?.drop();
});

onRedis('a job’s events', () => {
  let redis: TestRedis;
  beforeAll(async () => {
    redis = await startTestRedis();
  }, 60_000);
  afterAll(async () => {
    await redis?.stop();
  });

  /** An app whose processor steps once (BullMQ's step idiom), then completes. */
  async function startApp(queue: string): Promise<INestApplicationContext> {
    @Processor(queue)
    class Stepping extends WorkerHost {
      @IdempotentJob()
      async process(job: Job<{ step: string }>, token?: string) {
        if (job.data.step === 'first') {
          await job.moveToDelayed(Date.now() + 200, token);
          await job.updateData({ step: 'second' });
          throw new DelayedError();
        }
        return { done: job.id };
      }
    }
    @Module({
      imports: [
        IdempotencyModule.forRoot({ globalKeys: true, pool }),
        BullModule.forRoot({ connection: { host: '127.0.0.1', port: redis.port } }),
        BullModule.registerQueue({ name: queue }),
      ],
      providers: [Stepping],
    })
    class AppModule {}
    return NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
  }

  it('a step is jobStep (move: delayed); the job added again after it completed is a replay of kind job', async () => {
    const name = 'events-steps';
    const app = await startApp(name);
    const queue = new Queue(name, { connection: { port: redis.port } });
    const events = new QueueEvents(name, { connection: { port: redis.port } });
    try {
      await events.waitUntilReady();
      const seen = await recording(async () => {
        const opts = { jobId: 'payout-1', removeOnComplete: true };
        const first = await queue.add('payout', { step: 'first' }, opts);
        expect(await first.waitUntilFinished(events, 20_000)).toEqual({ done: 'payout-1' });
        const again = await queue.add('payout', { step: 'first' }, opts);
        expect(await again.waitUntilFinished(events, 20_000)).toEqual({ done: 'payout-1' });
      });
      const ofJob = seen.filter(({ event }) => event.tenant === `bullmq:${name}`);
      expect(ofJob.map(({ channel }) => channel)).toEqual([
        'claimed',
        'jobStep',
        'resumed',
        'stored',
        'replayed',
      ]);
      expect(ofJob[1].event).toMatchObject({
        route: 'Stepping.process',
        key: 'payout-1',
        move: 'delayed',
      });
      // In the metrics: counted apart from requests.
      expect(metricPoints('jobStep', ofJob[1].event).outcome?.attributes).toEqual({
        'idempotency.outcome': 'job_step',
        'idempotency.route': 'Stepping.process',
        'idempotency.kind': 'job',
        'idempotency.job.move': 'delayed',
      });
      expect(keyKind(ofJob[4].event.tenant as string)).toBe('job');
    } finally {
      await events.close();
      await queue.close();
      await app.close();
    }
  }, 60_000);
});

describe('a tick’s events, two replicas in one process', () => {
  /** A replica: its own Nest app, ticking every 300 ms on the same database. */
  async function startReplica(): Promise<INestApplicationContext> {
    const replicaPool = new Pool({ connectionString: database.url, max: 3 });
    @Injectable()
    class Settle {
      @IdempotentTask({ name: 'events' })
      @Interval(300)
      async run() {
        await sleep(50);
      }
    }
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        IdempotencyModule.forRoot({ globalKeys: true, pool: replicaPool }),
      ],
      providers: [Settle],
    })
    class AppModule {}
    const app = await NestFactory.createApplicationContext(AppModule, { logger: ['error'] });
    const close = app.close.bind(app);
    app.close = async () => {
      await close();
      await replicaPool.end();
    };
    return app;
  }

  it('each slot: one claimed, one stored; the other replica’s tickSkipped, never conflict or replayed', async () => {
    const seen = await recording(async () => {
      const replicas = await Promise.all([startReplica(), startReplica()]);
      await sleep(2_400);
      await Promise.all(replicas.map((app) => app.close()));
    });
    const ofTask = seen.filter(({ event }) => event.tenant === 'schedule:events');
    const bySlot = new Map<string, string[]>();
    for (const { channel, event } of ofTask) {
      bySlot.set(String(event.key), [...(bySlot.get(String(event.key)) ?? []), channel]);
    }
    const claimedSlots = [...bySlot.values()].filter((channels) => channels.includes('claimed'));
    expect(claimedSlots.length).toBeGreaterThanOrEqual(4);
    for (const channels of claimedSlots) {
      expect(channels.filter((channel) => channel === 'claimed')).toHaveLength(1);
      expect(channels.filter((channel) => channel === 'stored').length).toBeLessThanOrEqual(1);
    }
    const skipped = ofTask.filter(({ channel }) => channel === 'tickSkipped');
    expect(skipped.length).toBeGreaterThanOrEqual(3);
    for (const { event } of skipped) expect(['running', 'done']).toContain(event.reason);
    expect(
      ofTask.filter(({ channel }) => channel === 'conflict' || channel === 'replayed'),
    ).toEqual([]);
    expect(metricPoints('tickSkipped', skipped[0].event).outcome?.attributes).toMatchObject({
      'idempotency.outcome': 'tick_skipped',
      'idempotency.kind': 'tick',
      'idempotency.route': 'Settle.run',
    });
  }, 60_000);
});
