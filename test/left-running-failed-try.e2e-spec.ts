import { Controller, HttpCode, Module, Post, Query } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, RetryLaterError } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

/**
 * A handler that fails for a passing reason (503 `retry_later`: nothing stored, the key given
 * back) while a statement it left running still runs on the request's connection, past its
 * short lease: the `ROLLBACK` is sent behind that statement (its `databaseTimeoutMs` deadline
 * would cancel it), and the key is given back only after it. The lease is renewed meanwhile
 * (`heartbeatStop`, lib/claim/lease-renewals.ts), as for a commit: a retry that comes while the
 * failed try's statement still runs gets 409 `key_in_progress`, not a takeover whose work runs
 * beside it (its locks, its effects outside the transaction); one after it runs the handler
 * again, as a retry after a 503 does, and one row is kept. Before, the heartbeat stopped as the
 * failure was handed on, and the retry during the wait took the key over.
 */
let pool: Pool;
const runs = new Map<string, number>();

@Controller('payments')
class PaymentsController {
  @Post()
  @HttpCode(201)
  @Idempotent({ leaseMs: 1_000 })
  async pay(@Query('n') n: string) {
    const run = (runs.get(n) ?? 0) + 1;
    runs.set(n, run);
    await pool.query('INSERT INTO payments (note) VALUES ($1)', [n]);
    if (run > 1) return { n };
    // Given up on after 100 ms and left running (as Kysely's `'ignore query'` abort does),
    // then a dependency that is down: the try fails for a passing reason.
    const slow = pool.query('SELECT pg_sleep(2.5)').catch(() => undefined);
    await Promise.race([slow, new Promise((resolve) => setTimeout(resolve, 100))]);
    throw new RetryLaterError('the PSP did not answer');
  }
}

describe('a failed try whose statement still runs past its lease (pool seam)', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          // Longer than the statement: its ROLLBACK waits for it to end.
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 3_000 }),
        }),
      ],
      controllers: [PaymentsController],
    })
    class PaymentsModule {}
    fixture = await startPoolApp('left_running_failed_try', {
      module: PaymentsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE payments (id serial PRIMARY KEY, note text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = async (n: string) => {
    const answer = await request(fixture.app.getHttpServer())
      .post(`/payments?n=${n}`)
      .set('Idempotency-Key', `key-${n}`)
      .timeout(10_000);
    return `${answer.status} ${(answer.body as { code?: string }).code ?? ''}`.trim();
  };
  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it('a retry while it runs gets 409 key_in_progress; one after it runs again: one row', async () => {
    // Its answer held until its work is rolled back and its key given back: a retry that comes
    // meanwhile is another client's, or this one's after its own timeout.
    const first = post('p1');
    await sleep(1_600); // past one lease, the failed try's statement still running
    const during = await post('p1');
    const ranDuring = runs.get('p1');
    const firstAnswer = await first; // the statement done, rolled back, the key given back
    const after = await post('p1');
    const { rows } = await fixture.admin.query('SELECT 1 FROM payments WHERE note = $1', ['p1']);
    expect({
      first: firstAnswer,
      during,
      ranDuring,
      after,
      runs: runs.get('p1'),
      rows: rows.length,
    }).toEqual({
      first: '503 retry_later',
      during: '409 key_in_progress',
      ranDuring: 1,
      after: '201',
      runs: 2,
      rows: 1,
    });
  }, 30_000);
});
