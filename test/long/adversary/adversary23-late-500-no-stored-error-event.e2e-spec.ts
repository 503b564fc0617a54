import {
  Body,
  type CallHandler,
  Controller,
  type ExecutionContext,
  type INestApplication,
  Injectable,
  Module,
  type NestInterceptor,
  Post,
  RequestTimeoutException,
  UseInterceptors,
} from '@nestjs/common';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IDEMPOTENCY_CHANNELS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 23: a late answer (the handler settled after an inner timeout answered for
 * it) that is stored as a 500 publishes `stored` but never `storedError`, the channel
 * events-and-metrics.md tells apps to alert on ("a stored answer of 500 or more", its own
 * example subscribes a warning to it). Nor does it carry `stored`'s documented `durationMs`.
 *
 * What the app does (Express, pool): `POST /reports` (`@Idempotent({ maxResponseBytes: 2000 })`)
 * writes a row and returns a plain report object; Nest's timeout interceptor (`timeout(300)`)
 * is written above `@Idempotent()`. The app subscribes to `IDEMPOTENCY_CHANNELS.storedError`
 * to page someone when a key's final answer is a 500. This time the report is too large for
 * the route (5 kB) and slow (700 ms).
 *
 * What happens: settle-detached.ts:45-57 stores `tooLarge()` (a 500 `response_too_large`,
 * the key's final answer, replayed to every retry) and publishes only `stored` (without
 * `durationMs`); commit-answer.ts's path for the same answer in time (the control: the same
 * report, fast) publishes `stored` and `storedError`.
 *
 * What should happen: events-and-metrics.md: "Every outcome is published"; `storedError`:
 * "a stored answer of 500 or more"; `stored`'s payload: `status`, `durationMs`.
 *
 * Why it matters: a key whose permanent answer is a 500 is exactly what the alert exists for,
 * and the late path (a timeout, itself a sign of trouble) is where it goes unseen; the
 * `lease lost` case of the same function logs a warning but publishes no `leaseLost` either.
 * Severity: low (observability; no wrong answer, no double effect).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(300),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

@Controller()
class ReportsController {
  @Post('reports')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent({ maxResponseBytes: 2_000 })
  async create(@Body() body: { name: string; delayMs: number }) {
    await pool.query('INSERT INTO reports (name) VALUES ($1)', [body.name]);
    await sleep(body.delayMs);
    return { name: body.name, lines: 'x'.repeat(5_000) };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReportsController],
  providers: [TimeoutInterceptor],
})
class ReportsModule {}

describe('adversary 23: a late answer stored as a 500 publishes no storedError', () => {
  let fixture: PoolApp;
  let app: INestApplication;
  const events: { channel: string; key: string; status?: number; durationMs?: number }[] = [];
  const listeners = (['stored', 'storedError'] as const).map((name) => {
    const channel = IDEMPOTENCY_CHANNELS[name];
    const listener = (message: unknown) =>
      events.push({ channel: name, ...(message as { key: string; status?: number }) });
    return { channel, listener };
  });

  beforeAll(async () => {
    for (const { channel, listener } of listeners) subscribe(channel, listener);
    fixture = await startPoolApp('adv23_late_500_no_event', {
      module: ReportsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE reports (id serial PRIMARY KEY, name text NOT NULL)');
      },
    });
    app = fixture.app;
  }, 60_000);

  afterAll(async () => {
    for (const { channel, listener } of listeners) unsubscribe(channel, listener);
    await fixture?.close();
  });

  const send = (key: string, body: { name: string; delayMs: number }) =>
    request(app.getHttpServer())
      .post('/reports')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(body);

  it.each([
    ['fast report, no timeout: control', 10],
    ['slow report, the inner timeout answers first', 700],
  ])(
    '%s: its stored 500 publishes stored (with durationMs) and storedError',
    async (_name, delayMs) => {
      const key = `report-${delayMs}`;
      const body = { name: key, delayMs };
      await send(key, body);
      await sleep(1_500); // the late answer has been stored meanwhile
      const retry = await send(key, body);
      const mine = events.filter((event) => event.key === key);
      // Observed for the slow case: retry 500 replayed; only 'stored' { status: 500 }, with
      // no durationMs, and no 'storedError'.
      expect({
        retry: retry.status,
        replayed: retry.headers['idempotent-replayed'],
        events: mine.map((event) => ({
          channel: event.channel,
          status: event.status,
          timed: typeof event.durationMs === 'number',
        })),
      }).toEqual({
        retry: 500,
        replayed: 'true',
        events: [
          { channel: 'stored', status: 500, timed: true },
          { channel: 'storedError', status: 500, timed: false },
        ],
      });
    },
    20_000,
  );
});
