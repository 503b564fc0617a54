import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

/**
 * A data layer's transaction the handler started and did not await, still open when it
 * answers (a ledger posting handed to an event listener: debit, a wait, credit), on the pool
 * seam (adversary round 9 found it on TypeORM): the request's COMMIT would commit the debit
 * with the answer and the credit would fail after it, half of what its code meant to be all or
 * nothing. The request is refused instead (500 `transaction_aborted`, nothing kept); without
 * the library, the posting finishes on a connection of its own (both legs).
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let pool: Pool;
let db: NodePgDatabase;
const postings = new Map<string, Promise<string>>();

async function transfer(tag: string) {
  let debited!: () => void;
  const underWay = new Promise<void>((resolve) => (debited = resolve));
  const posting = db
    .transaction(async (tx) => {
      await tx.execute(sql`INSERT INTO ledger (tag, leg) VALUES (${tag}, 'debit')`);
      debited();
      await sleep(300);
      await tx.execute(sql`INSERT INTO ledger (tag, leg) VALUES (${tag}, 'credit')`);
    })
    .then(
      () => 'posted',
      (error: unknown) => `failed: ${(error as Error).name}`,
    );
  postings.set(tag, posting);
  await underWay;
  return { transfer: tag };
}

@Controller()
class TransfersController {
  @Post('transfers')
  @Idempotent()
  idempotent(@Body() body: { tag: string }) {
    return transfer(body.tag);
  }

  @Post('plain/transfers')
  plain(@Body() body: { tag: string }) {
    return transfer(body.tag);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [TransfersController],
})
class TransfersModule {}

describe('the pool seam: a nested transaction still open at the commit', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('pool_nested_open_at_commit', {
      module: TransfersModule,
      max: 3,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE ledger (tag text NOT NULL, leg text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = async (path: string, tag: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    const answer = await (key ? call.set('Idempotency-Key', key) : call).send({ tag });
    await postings.get(tag);
    const { rows } = await fixture.admin.query<{ leg: string }>(
      'SELECT leg FROM ledger WHERE tag = $1 ORDER BY leg',
      [tag],
    );
    return {
      status: answer.status,
      code: (answer.body as { code?: string }).code,
      legs: rows.map((row) => row.leg),
    };
  };

  it('without the library: 201, both legs (the control)', async () => {
    expect(await post('/plain/transfers', 'plain')).toEqual({
      status: 201,
      code: undefined,
      legs: ['credit', 'debit'],
    });
  });

  it('with it: refused, nothing kept, never the debit alone', async () => {
    expect(await post('/transfers', 'keyed', 'transfer-1')).toEqual({
      status: 500,
      code: 'transaction_aborted',
      legs: [],
    });
    expect(await postings.get('keyed')).toMatch(/^failed/);
  });
});
