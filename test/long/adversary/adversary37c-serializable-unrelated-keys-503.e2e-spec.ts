import { Controller, Headers, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { ADAPTERS, type AdapterName } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 37c: the library's own statements fail to serialize against each other for
 * requests of UNRELATED, fresh keys when the database's default isolation is SERIALIZABLE.
 *
 * App: node-postgres pool (the pool seam), `ALTER DATABASE app SET
 * default_transaction_isolation = 'serializable'` (docs/guides/transactions.md, "Isolation
 * levels": a supported set-up, "makes every request's transaction SERIALIZABLE"). One route,
 * `@Idempotent()`, whose handler does one `INSERT INTO orders` (no read). A burst of 60
 * concurrent requests, each with its own fresh key, three times.
 *
 * What happens: 7 to 58 of the 180 requests are answered 503 (six runs, each had some): most
 * `store_unavailable` (the claim itself: "could not serialize access due to read/write
 * dependencies among transactions" on `idempotency_claim_batch_v3`, then on the claims sent
 * again one by one, `idempotency_claim_v5`), some `database_transient` (the request's
 * transaction, its fenced answer UPDATE reading the keys' index beside the other requests'
 * claims), and a few of the give-backs after them (`idempotency_release_v5`) fail the same way
 * before their retry passes. The apart claim runs at the server's default isolation
 * (lib/claim/postgres-claim.store.ts:109-121 treats 40001 as "a row of this key committed after
 * my snapshot" and tries three times in all); a batch that fails with 40001 is sent again
 * claim by claim, all at once (lib/claim/claim-batcher.ts:180-191, `mayBeOneRows` takes class
 * 40 as one claim's), so those single claims, each reading the keys' unique index (SSI
 * predicate locks are per index page) and inserting into it, fail each other again. The keys
 * share nothing but the index's pages. transactions.md says the claim is made apart above READ
 * COMMITTED precisely because reads of the keys' table in a SERIALIZABLE transaction "would
 * make requests of unrelated keys fail to serialize": the apart claim, in autocommit at the
 * same default level, still does.
 *
 * Not round 21's finding (adversary21-serializable-claims-conflict: the claim and the answer
 * in ONE SERIALIZABLE transaction on a oneCommit route, fixed by claiming apart above READ
 * COMMITTED): here the route is a plain one and the claim is the apart one that fix relies on.
 *
 * Expected: 201 for every request (nothing of theirs conflicts: without the library the same
 * inserts at SERIALIZABLE all pass); at worst, the library's own bookkeeping (claims, their
 * retries, give-backs) runs at READ COMMITTED, where unrelated keys never conflict.
 *
 * Control: (1) the same route without `@Idempotent()`, same database, same burst: all 201;
 * (2) the same `@Idempotent()` route on a database left at READ COMMITTED: all 201.
 *
 * Severity: medium. No second execution and no false answer (a 503 that says "retry"), but a
 * supported configuration turns ordinary concurrency of unrelated clients into a steady rate
 * of 503s, each a client retry, and the retries add to the same contention.
 */
let pool: Pool;

@Controller()
class OrdersController {
  @Post('idempotent')
  @Idempotent()
  async idempotent(@Headers('idempotency-key') key: string) {
    await pool.query('INSERT INTO orders (ref) VALUES ($1)', [key]);
    return { key };
  }

  @Post('plain')
  async plain(@Headers('idempotency-key') key: string) {
    await pool.query('INSERT INTO orders (ref) VALUES ($1)', [key]);
    return { key };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

const BURST = 60;
const ROUNDS = 3;

/** The library's problem codes of the burst's answers that were not 201. */
let codes: Record<string, number> = {};

async function burst(app: PoolApp, path: string): Promise<Record<number, number>> {
  const server = app.app.getHttpServer();
  const statuses: Record<number, number> = {};
  codes = {};
  for (let round = 0; round < ROUNDS; round++) {
    const answers = await Promise.all(
      Array.from({ length: BURST }, (_, i) =>
        request(server)
          .post(`/${path}`)
          .set('Idempotency-Key', `${path}-${round}-${i}-${process.hrtime.bigint()}`),
      ),
    );
    for (const answer of answers) {
      statuses[answer.status] = (statuses[answer.status] ?? 0) + 1;
      const code = (answer.body as { code?: string }).code;
      if (code) codes[code] = (codes[code] ?? 0) + 1;
    }
  }
  return statuses;
}

async function start(adapter: AdapterName, serializable: boolean): Promise<PoolApp> {
  return startPoolApp(`adv37c_ser_${adapter}_${serializable ? 's' : 'rc'}`, {
    module: OrdersModule,
    max: 10,
    adapter,
    setup: async (admin) => {
      await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL)');
      if (serializable) {
        await admin.query(
          `ALTER DATABASE ${admin.database} SET default_transaction_isolation = 'serializable'`,
        );
      }
    },
    usePool: (started) => (pool = started),
  });
}

describe.each(ADAPTERS)('SERIALIZABLE by default: unrelated fresh keys at once (%s)', (adapter) => {
  describe('the database at SERIALIZABLE', () => {
    let app: PoolApp;
    beforeAll(async () => {
      app = await start(adapter, true);
    });
    afterAll(async () => app?.close());

    it('control: the same inserts without the library all pass', async () => {
      expect(await burst(app, 'plain')).toEqual({ 201: BURST * ROUNDS });
    });

    it("the library's own claims and give-backs never fail to serialize (no store_unavailable)", async () => {
      await burst(app, 'idempotent');
      expect(codes.store_unavailable ?? 0).toBe(0);
    });

    // Stated limit (the fix made the library's own statements READ COMMITTED; what is left is
    // the request's transaction itself): at SERIALIZABLE, by the database's default or a
    // route's `isolationLevel`, each request's transaction reads and updates its key's row
    // (the lease held at BEGIN, the stored answer at COMMIT); SSI locks the keys' index pages
    // those reads visit, so under a burst some requests of unrelated keys fail to serialize:
    // 503 `database_transient`, nothing done, the retry passes (docs/guides/transactions.md).
    it.skip('every @Idempotent() request of its own fresh key is answered 201', async () => {
      const statuses = await burst(app, 'idempotent');
      expect(statuses).toEqual({ 201: BURST * ROUNDS });
      const { rows } = await app.admin.query<{ n: string }>(
        `SELECT count(*) AS n FROM orders WHERE ref LIKE 'idempotent-%'`,
      );
      expect(Number(rows[0].n)).toBe(BURST * ROUNDS);
    });
  });

  describe('control: the database at READ COMMITTED', () => {
    let app: PoolApp;
    beforeAll(async () => {
      app = await start(adapter, false);
    });
    afterAll(async () => app?.close());

    it('the same @Idempotent() burst: all 201', async () => {
      expect(await burst(app, 'idempotent')).toEqual({ 201: BURST * ROUNDS });
    });
  });
});
