import { Body, Controller, HttpCode, Module, Post, UseFilters } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import {
  IdempotencyErrorFilter,
  IdempotencyModule,
  ProcessedMessages,
} from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does: a webhook controller applies each event once with
 * `ProcessedMessages.processOnce()` (docs/guides/consumers.md), on the pool seam, writing with
 * Drizzle built on the pool given to the library. The effect has a bug: it writes inside a
 * transaction it opened READ ONLY (`db.transaction(fn, { accessMode: 'read only' })`), so
 * PostgreSQL refuses the write with 25006, every time, on a writable primary.
 *
 * What happens: through Drizzle the delivery answers 503 `store_unavailable` with
 * `Retry-After` on every delivery, for ever: the handler's own 25006, wrapped in Drizzle's
 * `DrizzleQueryError`, is taken for a demoted primary. Round 8's fix (the request notes the
 * 25006 it met and marks the wrapper, `RequestTransaction.causeOf`/`failureOf`) is applied on
 * `@Idempotent()` routes, phases, GraphQL and `@IdempotentMessage()`, but not on
 * `processOnce()`, which classifies the effect's error as it is. The same bug written with
 * pg's own `pool.connect()` answers the handler's 500.
 *
 * What should happen: the effect's own error, as on a route and as with pg itself (a 500 the
 * sender sees as a failure, not "retry later"); a permanent error is never a 503.
 */
let pool: Pool;
let db: NodePgDatabase;

@Controller('webhooks')
@UseFilters(IdempotencyErrorFilter)
class WebhooksController {
  constructor(private readonly messages: ProcessedMessages) {}

  @Post('drizzle')
  @HttpCode(200)
  async drizzleEffect(@Body() event: { id: string; amount: number }) {
    const outcome = await this.messages.processOnce('psp', event.id, async () => {
      await db.transaction(
        async (tx) => {
          await tx.execute(
            sql`INSERT INTO refunds (event_id, amount) VALUES (${event.id}, ${event.amount})`,
          );
        },
        { accessMode: 'read only' },
      );
    });
    return { duplicate: outcome.duplicate };
  }

  @Post('pg')
  @HttpCode(200)
  async pgEffect(@Body() event: { id: string; amount: number }) {
    const outcome = await this.messages.processOnce('psp', event.id, async () => {
      const client = await pool.connect();
      try {
        await client.query('BEGIN READ ONLY');
        await client.query('INSERT INTO refunds (event_id, amount) VALUES ($1, $2)', [
          event.id,
          event.amount,
        ]);
        await client.query('COMMIT');
      } catch (error) {
        await client.query('ROLLBACK');
        throw error;
      } finally {
        client.release();
      }
    });
    return { duplicate: outcome.duplicate };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [WebhooksController],
})
class WebhooksModule {}

describe('adversary 9: processOnce, a handler-made 25006 through Drizzle', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv9_process_once_ro', {
      module: WebhooksModule,
      usePool: (started) => {
        pool = started;
        db = drizzle({ client: started });
      },
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE refunds (id serial PRIMARY KEY, event_id text NOT NULL, amount int NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const deliver = (path: string, id: string) =>
    request(fixture.app.getHttpServer()).post(`/webhooks/${path}`).send({ id, amount: 5 });

  it('pg itself: the effect’s own error, 500, on every delivery (control)', async () => {
    const first = await deliver('pg', 'evt-pg');
    const second = await deliver('pg', 'evt-pg');
    expect([first.status, second.status]).toEqual([500, 500]);
  });

  it('Drizzle: the same bug is the effect’s own error too, never 503 store_unavailable', async () => {
    const first = await deliver('drizzle', 'evt-drizzle');
    const second = await deliver('drizzle', 'evt-drizzle');
    const answers = [first, second].map((answer) => ({
      status: answer.status,
      code: (answer.body as { code?: string }).code,
      retryAfter: answer.headers['retry-after'],
    }));
    expect(answers).toEqual([
      { status: 500, code: undefined, retryAfter: undefined },
      { status: 500, code: undefined, retryAfter: undefined },
    ]);
    const { rows } = await fixture.admin.query('SELECT count(*)::int AS n FROM refunds');
    expect(rows[0].n).toBe(0);
  });
});
