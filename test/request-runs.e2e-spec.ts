import {
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Param,
  Post,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { map, type Observable, take, timer } from 'rxjs';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

/**
 * A request the app runs twice at once (see lib/http/earlier-run.ts): its interceptor outside
 * `@Idempotent()` subscribes to the handler on the side as well as returning it. The side
 * subscription that takes only the first value (`take(1)`) unsubscribes the run that owns the
 * key: the returned run, waiting for what that handler comes to, must still get its answer
 * (it waited for ever before), and the handler runs once. With two side subscriptions (three
 * runs), the third met the second, which only joins the first: it claimed the key again, and
 * its 409 was stored as the answer with the first run's row.
 */
let pool: Pool;
let side = { takesOne: false, count: 1 };

@Injectable()
class SideInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    const result$ = next.handle();
    for (let n = 0; n < side.count; n++) {
      (side.takesOne ? result$.pipe(take(1)) : result$).subscribe({ error: () => undefined });
    }
    return result$;
  }
}

@Controller()
class TicksController {
  /** An Observable answer: its row written first, then two values 30 ms apart. */
  @Post('ticks/:ref')
  @Idempotent()
  async tick(@Param('ref') ref: string): Promise<Observable<{ ref: string; n: number }>> {
    await pool.query('INSERT INTO ticks (ref) VALUES ($1)', [ref]);
    return timer(0, 30).pipe(
      take(2),
      map((n) => ({ ref, n })),
    );
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [TicksController],
  providers: [{ provide: APP_INTERCEPTOR, useClass: SideInterceptor }],
})
class AppModule {}

describe('a request run twice at once by an interceptor outside @Idempotent()', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('request_runs', {
      module: AppModule,
      max: 4,
      setup: async (admin) => {
        await admin.query('CREATE TABLE ticks (ref text NOT NULL)');
      },
      usePool: (given) => (pool = given),
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const rows = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM ticks WHERE ref = $1', [ref])).rows[0].count,
    );

  it.each<[string, boolean, number]>([
    ['the side subscription takes every value', false, 1],
    ['the side subscription takes the first value only', true, 1],
    ['two side subscriptions take every value', false, 2],
    ['two side subscriptions take the first value only', true, 2],
  ])('%s: answered, one run, replayed', async (_name, takesOne, count) => {
    side = { takesOne, count };
    const ref = `ticks-${takesOne}-${count}`;
    const post = () =>
      request(fixture.app.getHttpServer())
        .post(`/ticks/${ref}`)
        .set('Idempotency-Key', ref)
        .timeout(5000);
    const first = await post();
    expect(first.status).toBe(201);
    expect(await rows(ref)).toBe(1);
    const again = await post();
    expect({ status: again.status, body: again.body as unknown }).toEqual({
      status: 201,
      body: first.body as unknown,
    });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(await rows(ref)).toBe(1);
  });
});
