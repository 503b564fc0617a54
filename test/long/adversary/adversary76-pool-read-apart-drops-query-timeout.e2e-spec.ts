/**
 * Adversary 76: a read that bounds its own wait with node-postgres' per-query `query_timeout`
 * (`pool.query({ text, query_timeout })`) is not bounded in an `@Idempotent()` request: while a
 * migration holds the table's ACCESS EXCLUSIVE lock, the handler waits for as long as the lock
 * is held (the key held with it), where without the library it hears `Query read timeout`
 * after 500 ms and answers its fallback.
 *
 *   try {
 *     const { rows } = await pool.query({
 *       text: 'SELECT count(*)::int AS n FROM stock',
 *       query_timeout: 500,                              // node-postgres' own, per query
 *     });
 *     return { n: rows[0].n };
 *   } catch (error) {
 *     if ((error as Error).message === 'Query read timeout') return { n: null, busy: true };
 *     throw error;
 *   }
 *
 * Why: a plain read before the first write runs apart (`PoolTransaction.readApart`), sent as the
 * statement `queryStatement` (lib/connection/prefixed-query.ts) rebuilds from the config: its
 * text, values, `rowMode` and `types` only. `query_timeout` (and `binary`) are dropped, and the
 * `PrefixedQuery` handed to node-postgres is a submittable of the library's, so
 * `Client.query` reads `config.query_timeout` off that object (none) and falls back to the
 * pool's (none set). The same statement carried behind the request's `BEGIN`
 * (`carriedStatement` → `beginWith`) loses it too.
 *
 * Expected: docs/guides/data-layers.md: "Outside an idempotent request the pool is exactly as it
 * was", and `pool.query()` in the request is node-postgres' as the app wrote it; the brief:
 * "nothing hangs and holds a key".
 *
 * Control: without `@Idempotent()`: 201 `{ n: null, busy: true }` while the lock is held.
 *
 * Severity: medium (the request, and its key, held for as long as another session holds the
 * lock, past the bound its code set; a retry meanwhile waits or gets 409; nothing runs twice).
 *
 * Fails now: keyed: "none within 8 s" (no answer while the lock is held); the control passes.
 *
 * Suggested fix: carry `query_timeout` (and `binary`) in `queryStatement` and set it on the
 * `PrefixedQuery` (node-postgres reads `config.query_timeout` off the submittable), or decline
 * to carry a config with keys it does not know (run it as the app sent it).
 *
 * Fixed: `queryStatement` carries `query_timeout` (set on the `PrefixedQuery`, where node-
 * postgres reads it) and `binary`; `carriedStatement` does not carry one with a `query_timeout`
 * behind the BEGIN.
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body76 = { tag: string };

async function work(pool: Pool) {
  try {
    const { rows } = await pool.query<{ n: number }>({
      text: 'SELECT count(*)::int AS n FROM adv76prq_stock',
      query_timeout: 500,
    } as { text: string });
    return { n: rows[0].n };
  } catch (error) {
    if ((error as Error).message === 'Query read timeout') return { n: null, busy: true };
    throw error;
  }
}

@Controller()
class StockController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() _body: Body76) {
    return work(this.pool);
  }

  @Post('plain')
  plain(@Body() _body: Body76) {
    return work(this.pool);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [StockController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class StockModule {}

describe('adversary 76: a per-query query_timeout on a read that runs apart', () => {
  let fixture: PoolApp;
  /** A migration's session: it holds the table's ACCESS EXCLUSIVE lock. */
  let migration: Client;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_read_timeout', {
      module: StockModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv76prq_stock (id serial PRIMARY KEY)');
      },
    });
    migration = new Client({ connectionString: fixture.database.url });
    await migration.connect();
  }, 60_000);

  afterAll(async () => {
    await migration?.query('ROLLBACK').catch(() => undefined);
    await migration?.end().catch(() => undefined);
    await fixture?.close();
  });

  /** The answer to `path` while the lock is held, or 'none within 8 s'. */
  const whileLocked = async (path: string, key: string | undefined) => {
    await migration.query('BEGIN; LOCK TABLE adv76prq_stock IN ACCESS EXCLUSIVE MODE');
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const answer = call.send({ tag: key ?? 'plain' }).then((response) => ({
      status: response.status,
      body: response.body as unknown,
    }));
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<'none within 8 s'>((resolve) => {
      timer = setTimeout(() => resolve('none within 8 s'), 8_000);
    });
    try {
      return await Promise.race([answer, bound]);
    } finally {
      clearTimeout(timer);
      await migration.query('ROLLBACK');
      await answer.catch(() => undefined);
    }
  };

  it('control: without @Idempotent(): the fallback while the lock is held', async () => {
    expect(await whileLocked('/plain', undefined)).toEqual({
      status: 201,
      body: { n: null, busy: true },
    });
  }, 30_000);

  it('keyed: the fallback while the lock is held, as without the library', async () => {
    expect(await whileLocked('/keyed', 'keyed-1')).toEqual({
      status: 201,
      body: { n: null, busy: true },
    });
  }, 30_000);
});
