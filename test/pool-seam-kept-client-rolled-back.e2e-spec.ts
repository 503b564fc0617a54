/**
 * A client taken with `pool.connect()` in a request and kept, its `BEGIN` sent there: once that
 * request ended, however it ended, the transaction went with it. A `COMMIT` sent on the client
 * from a later request is refused with `KeptClientTransactionGoneError` (nothing can run in it,
 * a `COMMIT` commits nothing), never with `KeptClientCommittedElsewhereError`, whose text says
 * the transaction is still open and its writes "stay in" the taker's transaction: false once
 * the taker rolled back (reviewer, round 107: lib/data-layers/client-place.ts `heldView`).
 */
import { Body, Controller, HttpCode, Module, Post } from '@nestjs/common';
import { type Pool, type PoolClient } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

let pool: Pool;
let kept: PoolClient | undefined;
let refusal: string | undefined;

@Controller('batch')
class BatchController {
  /** Takes the client, begins its transaction, writes, and ends as `end` says. */
  @Post('begin')
  @HttpCode(201)
  @Idempotent()
  async begin(@Body() { sku, end }: { sku: string; end: 'throw' | 'return' }) {
    kept = await pool.connect();
    await kept.query('BEGIN');
    await kept.query(`INSERT INTO audit (sku) VALUES ($1)`, [sku]);
    if (end === 'throw') throw new Error('the handler failed');
    return { sku };
  }

  /** Commits the kept client's transaction from this request. */
  @Post('commit')
  @HttpCode(201)
  @Idempotent()
  async commit() {
    const client = kept!;
    kept = undefined;
    try {
      await client.query('COMMIT');
      refusal = 'none';
    } catch (error) {
      refusal = `${(error as Error).name}: ${(error as Error).message}`;
      throw error;
    } finally {
      client.release();
    }
    return { ok: true };
  }
}

describe('pool seam: a COMMIT on a kept client whose request rolled back is told its transaction is gone', () => {
  let fixture: PoolApp;
  let n = 0;

  beforeAll(async () => {
    @Module({
      imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
      controllers: [BatchController],
    })
    class BatchModule {}
    fixture = await startPoolApp('pool_seam_kept_rolled_back', {
      module: BatchModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE audit (id bigserial PRIMARY KEY, sku text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function story(end: 'throw' | 'return') {
    refusal = undefined;
    const sku = `${end}-${++n}`;
    const post = async (path: string, body: object) => {
      const answer = await request(fixture.app.getHttpServer())
        .post(`/batch/${path}`)
        .set('Idempotency-Key', `${path}-${sku}`)
        .send(body)
        .timeout(20_000);
      return `${answer.status} ${(answer.body as { code?: string }).code}`;
    };
    const begun = await post('begin', { sku, end });
    const committed = await post('commit', {});
    const { rows } = await fixture.admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM audit WHERE sku = $1`,
      [sku],
    );
    // Set by the commit handler (the narrowing above does not see it).
    const said = refusal as string | undefined;
    return { begun, committed, refusal: said?.split(':')[0], audit: rows[0].n, text: said };
  }

  it('control: its request refused at its commit (BEGIN left open): KeptClientTransactionGoneError', async () => {
    const outcome = await story('return');
    expect({ ...outcome, text: undefined }).toEqual({
      begun: '500 transaction_aborted',
      committed: '500 runner_connected_outside_request',
      refusal: 'KeptClientTransactionGoneError',
      audit: 0,
      text: undefined,
    });
  }, 60_000);

  it('its request rolled back because its handler threw: KeptClientTransactionGoneError too', async () => {
    const outcome = await story('throw');
    expect({ ...outcome, text: undefined }).toEqual({
      begun: '500 undefined',
      committed: '500 runner_connected_outside_request',
      refusal: 'KeptClientTransactionGoneError',
      audit: 0,
      text: undefined,
    });
    expect(outcome.text).not.toMatch(/stay in that request/);
  }, 60_000);
});
