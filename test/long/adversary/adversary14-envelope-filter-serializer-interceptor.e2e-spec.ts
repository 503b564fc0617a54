import {
  type ArgumentsHost,
  Body,
  Catch,
  type CallHandler,
  Controller,
  type ExceptionFilter,
  type ExecutionContext,
  HttpException,
  Injectable,
  InternalServerErrorException,
  Module,
  type NestInterceptor,
  Post,
} from '@nestjs/common';
import { APP_FILTER, APP_INTERCEPTOR } from '@nestjs/core';
import { type Pool } from 'pg';
import { map, type Observable } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Express): the house style of adversary 13's
 * unwritten-value-envelope-filter, with its usual partner. One global catch-all exception
 * filter answers every error as `200 { success: false, message }`; one global response
 * interceptor checks each answer against its DTO before wrapping it as
 * `{ success: true, data }` (what nestjs-zod's ZodSerializerInterceptor does: a value that does
 * not match is a bug, thrown as an InternalServerErrorException). A handler writes an order and
 * returns the row, whose `total` the DTO says is a number but node-postgres hands back as a
 * string (numeric): the interceptor throws, the filter answers `200 { success: false }`.
 *
 * What happens: the order commits, and what is stored is not what the client was told: the
 * first answer is the filter's `200 { success: false, message }`, but the key stores (and
 * every retry replays, `idempotent-replayed: true`) `201 {"id":…,"item":…,"total":"9.99"}`,
 * the handler's raw row, which no client ever received and which the app's interceptor
 * refused. 265892b rolls back a value only when Express's `res.json()` throws
 * (watchJsonWrite) or the answer is a 5xx (isUnwrittenValue); here the value was refused by an
 * interceptor outside the library's, after the handler returned, and the filter's 200 was
 * written without trouble. The same handler throwing (the control) is rolled back with the
 * envelope stored.
 *
 * What should happen: the request failed (its answer says so, for ever): nothing kept, the
 * envelope stored and replayed.
 *
 * Why it matters: two promises at once: the client is first told the order failed while it
 * commits, then a retry gets a different answer (201, in a shape the app never sends). A
 * response-validation interceptor with a catch-all envelope filter is a common Nest set-up.
 */
let pool: Pool;

/** Express's response, as much of it as the filter uses. */
type ExpressResponse = { status(code: number): { json(body: unknown): void } };

@Catch()
class EnvelopeFilter implements ExceptionFilter {
  catch(error: unknown, host: ArgumentsHost) {
    const message =
      error instanceof HttpException ? error.message : 'something went wrong, please contact us';
    host
      .switchToHttp()
      .getResponse<ExpressResponse>()
      .status(200)
      .json({ success: false, message });
  }
}

/** The answer checked against its DTO (`total: number`), then wrapped. */
@Injectable()
class ResponseInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      map((data: { total?: unknown }) => {
        if (typeof data.total !== 'number') {
          throw new InternalServerErrorException('the answer does not match OrderDto');
        }
        return { success: true, data };
      }),
    );
  }
}

@Controller()
class OrdersController {
  @Post('orders')
  @Idempotent()
  async create(@Body() body: { item: string }) {
    const { rows } = await pool.query<{ id: number; item: string; total: string }>(
      'INSERT INTO orders (item, total) VALUES ($1, 9.99) RETURNING id, item, total',
      [body.item],
    );
    return rows[0];
  }

  @Post('orders-throwing')
  @Idempotent()
  async createThrowing(@Body() body: { item: string }) {
    await pool.query('INSERT INTO orders (item, total) VALUES ($1, 9.99)', [body.item]);
    throw new Error('a bug after the write');
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
  providers: [
    { provide: APP_FILTER, useClass: EnvelopeFilter },
    { provide: APP_INTERCEPTOR, useClass: ResponseInterceptor },
  ],
})
class OrdersModule {}

describe('adversary 14: a value refused by an outer serializing interceptor, answered 200 by an envelope filter', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv14_envelope_interceptor', {
      module: OrdersModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE orders (id serial PRIMARY KEY, item text NOT NULL, total numeric NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (path: string, item: string) =>
    request(fixture.app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', `key-${item}`)
      .send({ item });

  const kept = async (item: string) =>
    (await fixture.admin.query('SELECT 1 FROM orders WHERE item = $1', [item])).rows.length;

  it('a handler that throws (control): the envelope stored, nothing kept', async () => {
    const first = await send('/orders-throwing', 'thrown');
    const retry = await send('/orders-throwing', 'thrown');
    expect({
      first: [first.status, first.body.success],
      same: retry.text === first.text,
      kept: await kept('thrown'),
    }).toEqual({ first: [200, false], same: true, kept: 0 });
  }, 20_000);

  // Triage (the session that fixed this): the half that breaks the promise was the replay, a
  // 201 never sent; it now replays the envelope sent. "Nothing kept" is not asked of the
  // library here: the handler returned, and the app's own filter turned the interceptor's
  // error into a 200, as it would without the library, where the order commits with its own
  // statement. The library cannot see an error raised and answered outside it (a 5xx, or a
  // write that threw, it does see: adversary 12's and 13's suites). Kept: 1.
  it('a value the interceptor refused: the envelope sent is stored and replayed', async () => {
    const first = await send('/orders', 'refused');
    const retry = await send('/orders', 'refused');
    // Observed before the fix: first 200 { success: false }, retry 201 with the raw row.
    expect({
      first: [first.status, first.body.success],
      same: retry.text === first.text,
      kept: await kept('refused'),
    }).toEqual({ first: [200, false], same: true, kept: 1 });
  }, 20_000);
});
