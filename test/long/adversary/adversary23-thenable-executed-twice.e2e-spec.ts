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
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { integer, pgTable, serial, text } from 'drizzle-orm/pg-core';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 23: an inner timeout re-runs a handler's lazy thenable (a Drizzle query).
 *
 * What the app does (Express, Drizzle on the pool given to the library, docs/guides/drizzle.md):
 * `POST /charges` returns Drizzle's insert builder without awaiting it, the ordinary one-liner
 * `return this.db.insert(charges).values(...).returning()` (a `QueryPromise`: a thenable whose
 * every `then()` runs `execute()`, i.e. sends the INSERT again). Nest's documented timeout
 * interceptor (`timeout(250)`, `TimeoutError` to `RequestTimeoutException`) is written above
 * `@Idempotent()` (inside the library). The INSERT is slow this time (a trigger, 700 ms: a
 * lock wait, a slow disk). The client gets the 408, waits, retries with its key.
 *
 * What happens: Nest's handler wrapper (an async function) adopts the thenable: `then()` #1,
 * the INSERT runs. The inner timeout fires; run-owned.ts:296-298 takes `handlerOutcome(
 * context.handlerReturned)`, and lib/http/handler-result.ts:194 `Promise.resolve(returned.value)`
 * calls the thenable's `then()` again: a second INSERT, in the same request transaction. The
 * late answer (the second INSERT's rows, plain data) commits with BOTH rows: one key, one
 * replayed answer, two charges. lib/idempotent.decorator.ts:31-32 knows the hazard ("another
 * thenable's `then()` may do the work ... which Nest's own await then does again") and avoids it
 * there, but handlerOutcome does exactly that.
 *
 * What should happen: transactions.md failure table, "a timeout inside `@Idempotent()`": "a
 * handler whose Promise goes on: as under an outer timeout, its effects commit with its own
 * answer when it settles": the handler's one INSERT, once (README: exactly once). The control
 * is the same route with `async`/`await` (a native Promise): one row.
 *
 * Why it matters: a double charge under one idempotency key, exactly what the library exists
 * to prevent, from the most common Drizzle style (also Knex's builders, any lazy thenable), on
 * the documented timeout setup, and the replay hides it (the retry sees one answer).
 * Severity: high.
 */
const charges = pgTable('charges', {
  id: serial('id').primaryKey(),
  ref: text('ref').notNull(),
  amount: integer('amount').notNull(),
  delayMs: integer('delay_ms').notNull(),
});
let db: NodePgDatabase;

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(250),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

interface ChargeBody {
  ref: string;
  amount: number;
  delayMs: number;
}

@Controller()
class ChargesController {
  // Drizzle's builder returned as is (a thenable, not a native Promise).
  @Post('charges-builder')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  createBuilder(@Body() body: ChargeBody) {
    return db.insert(charges).values(body).returning();
  }

  // The control: the same INSERT, awaited (a native Promise).
  @Post('charges-awaited')
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  async createAwaited(@Body() body: ChargeBody) {
    return await db.insert(charges).values(body).returning();
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool: (db as unknown as { $client: never }).$client }),
    }),
  ],
  controllers: [ChargesController],
  providers: [TimeoutInterceptor],
})
class ChargesModule {}

describe('adversary 23: an inner timeout runs a handler thenable (Drizzle builder) twice', () => {
  let fixture: PoolApp;
  let app: INestApplication;
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  beforeAll(async () => {
    fixture = await startPoolApp('adv23_thenable_twice', {
      module: ChargesModule,
      max: 4,
      usePool: (started) => {
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query(
          `CREATE TABLE charges (id serial PRIMARY KEY, ref text NOT NULL, amount int NOT NULL,
             delay_ms int NOT NULL)`,
        );
        await admin.query(`CREATE FUNCTION slow_charge() RETURNS trigger LANGUAGE plpgsql AS $$
          BEGIN PERFORM pg_sleep(NEW.delay_ms / 1000.0); RETURN NEW; END $$`);
        await admin.query(
          'CREATE TRIGGER slow_charge BEFORE INSERT ON charges FOR EACH ROW EXECUTE FUNCTION slow_charge()',
        );
      },
    });
    app = fixture.app;
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = (path: string, key: string, body: ChargeBody) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).timeout(10_000).send(body);

  it.each([
    ['awaited (native Promise): control', '/charges-awaited'],
    ['Drizzle builder returned (thenable)', '/charges-builder'],
  ])(
    '%s: a slow INSERT past the inner timeout charges once',
    async (_name, path) => {
      const ref = `ref-${path}`;
      const body = { ref, amount: 500, delayMs: 700 };
      const first = await send(path, `key-${path}`, body);
      await sleep(2_000); // the handler settled and its late answer committed meanwhile
      const retry = await send(path, `key-${path}`, body);
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM charges WHERE ref = $1',
        [ref],
      );
      // Observed on the builder route: first 408, retry 201 replayed, 2 rows.
      expect({
        first: first.status,
        retry: retry.status,
        charges: (rows.rows[0] as { n: number }).n,
      }).toEqual({ first: 408, retry: 201, charges: 1 });
    },
    20_000,
  );
});
