import { Body, Controller, HttpCode, Module, Post, UseFilters } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import {
  IdempotencyErrorFilter,
  IdempotencyModule,
  Idempotent,
  ProcessedMessages,
} from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does: a webhook applies each event once with `ProcessedMessages.processOnce()`
 * (docs/guides/consumers.md) on the pool seam, with pg itself. The effect bumps a statistics
 * counter as a best effort (its failure caught and logged), then writes the refund. The
 * database has a `lock_timeout` (the operator's), and the counter's row is held by another
 * transaction for a moment: the bump fails with 55P03, a passing failure.
 *
 * What happens: the effect's next statement meets "current transaction is aborted" (25P02),
 * which `processOnce` takes for the effect's own error: the sender gets 500. On an
 * `@Idempotent()` route the same code is answered by what the request met (the lock timeout:
 * 503 `database_transient`, `Retry-After`), as `RequestTransaction.causeOf` reads it;
 * `processOnce` does not use it.
 *
 * What should happen (consumers.md): a delivery rolled back for a passing reason (a lock
 * timeout) throws `TransientDatabaseError`, and a webhook sender gets 503 with `Retry-After`,
 * "never a 500".
 */
let pool: Pool;

async function effect(event: { id: string }) {
  try {
    await pool.query('UPDATE stats SET deliveries = deliveries + 1 WHERE id = 1');
  } catch {
    // best effort: statistics must not fail a refund
  }
  await pool.query('INSERT INTO refunds (event_id) VALUES ($1)', [event.id]);
}

@Controller()
@UseFilters(IdempotencyErrorFilter)
class WebhooksController {
  constructor(private readonly messages: ProcessedMessages) {}

  @Post('webhooks/psp')
  @HttpCode(200)
  async receive(@Body() event: { id: string }) {
    const outcome = await this.messages.processOnce('psp', event.id, () => effect(event));
    return { duplicate: outcome.duplicate };
  }

  @Post('refunds')
  @Idempotent()
  async route(@Body() event: { id: string }) {
    await effect(event);
    return { id: event.id };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [WebhooksController],
})
class WebhooksModule {}

describe('adversary 9: processOnce, a caught lock timeout', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv9_process_once_lock', {
      module: WebhooksModule,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE stats (id int PRIMARY KEY, deliveries int NOT NULL)');
        await admin.query('INSERT INTO stats VALUES (1, 0)');
        await admin.query('CREATE TABLE refunds (event_id text NOT NULL)');
        const { rows } = await admin.query<{ name: string }>('SELECT current_database() AS name');
        await admin.query(`ALTER DATABASE ${rows[0].name} SET lock_timeout = '200ms'`);
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  /** Runs `call` while another transaction holds the counter's row. */
  async function whileCounterLocked<T>(call: () => Promise<T>): Promise<T> {
    await fixture.admin.query('BEGIN');
    await fixture.admin.query('SELECT 1 FROM stats WHERE id = 1 FOR UPDATE');
    try {
      return await call();
    } finally {
      await fixture.admin.query('ROLLBACK');
    }
  }

  it('on an @Idempotent() route: 503 database_transient (control)', async () => {
    const answer = await whileCounterLocked(() =>
      request(fixture.app.getHttpServer())
        .post('/refunds')
        .set('Idempotency-Key', 'route-1')
        .send({ id: 'route-1' }),
    );
    expect({ status: answer.status, code: (answer.body as { code?: string }).code }).toEqual({
      status: 503,
      code: 'database_transient',
    });
  }, 30_000);

  it('through processOnce: 503 with Retry-After, never a 500', async () => {
    const answer = await whileCounterLocked(() =>
      request(fixture.app.getHttpServer()).post('/webhooks/psp').send({ id: 'evt-1' }),
    );
    expect({ status: answer.status, retryAfter: answer.headers['retry-after'] }).toEqual({
      status: 503,
      retryAfter: '1',
    });
  }, 30_000);
});
