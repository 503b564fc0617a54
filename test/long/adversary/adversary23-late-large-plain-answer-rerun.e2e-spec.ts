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
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 23: a late answer that is plain data but has more than 10,000 values
 * (`MAX_NODES`, lib/http/plain-data.ts:2,18) is not stored: the slow bulk import is rolled
 * back and its key given back, and each retry runs the whole import again, to the same
 * timeout, for ever.
 *
 * What the app does (Express, pool): `POST /imports` (`@Idempotent()`) inserts a batch of
 * 1,000 items and answers them (`{ id, sku, qty, ... }` each, 10 fields: ~11,000 values,
 * ~160 kB, well under `maxResponseBytes`' 1 MiB); Nest's timeout interceptor (`timeout(500)`)
 * is written above `@Idempotent()`. The import is slow (900 ms: an index rebuild, a lock).
 * The client gets the 408, waits for the import to settle, and retries with its key.
 *
 * What happens: settle-detached.ts:37-41: `isPlainData` gives up after 10,000 values and
 * answers false, as for a class instance: rolled back, key given back ('released', timeout).
 * The retry runs the import again (slow again: 408 again, rolled back again): the client
 * can never get the batch's answer, and the database does the whole import each time.
 *
 * What should happen: transactions.md's failure table (an outer timeout, and a timeout inside
 * `@Idempotent()`, "as under an outer timeout"): "its effects commit with its own answer
 * (rendered as `JSON.stringify` would) if that answer is plain data (objects, arrays, dates,
 * strings, numbers)"; "409 until then, then replays the handler's answer". Nothing in the docs
 * limits the count of values; the route's size limit is `maxResponseBytes`. The control, a
 * batch of 100 items, is stored late and replayed.
 *
 * Why it matters: the routes that time out are the slow ones, and the slow ones are the bulk
 * ones with the large answers: the limit turns "the work is done once, its answer replayed"
 * into "the work is never kept" for them. Severity: low-medium (no double effect; a livelock
 * of retries, wasted work, and an answer that contradicts the table).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(500),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

@Controller()
class ImportsController {
  @Post('imports')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  async create(@Body() body: { batch: string; items: number }) {
    const { rows } = await pool.query<{ id: number; sku: string }>(
      `INSERT INTO items (batch, sku) SELECT $1, 'sku-' || n FROM generate_series(1, $2) AS n
       RETURNING id, sku`,
      [body.batch, body.items],
    );
    await sleep(900); // the slow part of the import
    return rows.map((row) => ({
      id: row.id,
      sku: row.sku,
      batch: body.batch,
      qty: 1,
      price: 100,
      currency: 'EUR',
      warehouse: 'main',
      status: 'imported',
      tax: 20,
      note: '',
    }));
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ImportsController],
  providers: [TimeoutInterceptor],
})
class ImportsModule {}

describe('adversary 23: a late plain answer of more than 10,000 values is never stored', () => {
  let fixture: PoolApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv23_late_large_plain', {
      module: ImportsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE items (id serial PRIMARY KEY, batch text NOT NULL, sku text NOT NULL)',
        );
      },
    });
    app = fixture.app;
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = (key: string, body: { batch: string; items: number }) =>
    request(app.getHttpServer())
      .post('/imports')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(body);

  it.each([
    ['100 items (1,100 values): control', 100],
    ['1,000 items (11,000 values)', 1_000],
  ])(
    '%s: the late import commits once and its retry replays it',
    async (_name, items) => {
      const batch = `batch-${items}`;
      const first = await send(batch, { batch, items });
      await sleep(1_500); // the import has settled meanwhile
      const retry = await send(batch, { batch, items });
      const stored = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM items WHERE batch = $1',
        [batch],
      );
      // Observed for 1,000 items: first 408, retry 408 (ran the import again), not replayed;
      // 0 items committed (each run rolled back; the retry's own run still going).
      expect({
        first: first.status,
        retry: retry.status,
        replayed: retry.headers['idempotent-replayed'],
        items: (stored.rows[0] as { n: number }).n,
        answered: Array.isArray(retry.body) ? (retry.body as unknown[]).length : 0,
      }).toEqual({ first: 408, retry: 201, replayed: 'true', items, answered: items });
      await sleep(1_500); // let any run still going settle before the next case
    },
    20_000,
  );
});
