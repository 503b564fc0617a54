/**
 * Fixed (session of 2026-12-07): every statement of the library's own carries node-postgres' per-
 * query `types` of its own (lib/connection/library-types.ts: fixed parsers for json, jsonb, bytea,
 * bool, ints, floats, timestamps and arrays, the text for every other type), put on at the choke
 * points (lib/connection/deadline.ts `queryWithDeadline`, lib/connection/session-state.ts
 * `runSurrounded`, so `libraryStatement`, the claims, takeovers, fenced commits and the schema
 * check; the BEGIN and level reads of lib/transaction/request-transaction.ts, the partitioned
 * store's maintenance, the CLI's client, the jobs' schema read): neither a pool's `types` nor
 * `pg.types.setTypeParser` reaches what the library reads; the app's own statements keep the app's
 * parsers.
 *
 * Adversary 105 (pool): a pool whose jsonb type parser keeps jsonb as text (`types` on the
 * Pool's config, or `pg.types.setTypeParser(3802, …)`) makes a retry after a 503 run every
 * completed phase again: the library reads its own `phase_results` through the app's parser.
 *
 * An app that wants its jsonb columns as text (to send them on as they are, or to parse them
 * with a BigInt-safe JSON parser of its own) gives the pool a `types` override, as node-postgres
 * documents. The library runs its own statements on that pool's clients (the claim, the takeover)
 * and reads `phase_results` (jsonb) with whatever parser the client has: a string, not an
 * object. A retry that takes the key over then finds no completed phase (`Object.entries` of the
 * string gives its characters), and runs them all again: the first phase's insert is there twice,
 * and the external call of a completed `call()` phase (a PSP charge) is made twice.
 *
 * User code:
 *   const pool = new Pool({ ..., types: { getTypeParser: (oid, format) =>
 *     oid === 3802 ? (text) => text : pg.types.getTypeParser(oid, format) } });
 *   @Post() @Idempotent()
 *   async pay(@Body() { sku }) {
 *     await phases.run('reserved', () => pool.query('INSERT INTO orders …', [sku]));
 *     await phases.call('charged', () => psp.charge(sku), (_m, r) => r);
 *     await phases.call('shipped', () => carrier.book(sku), (_m, r) => r); // down: RetryLaterError
 *     return phases.finish(async () => ({ sku }));
 *   }
 *
 * Code path: lib/claim/postgres-claim.store.ts `takeOver` (TAKE_OVER's `phase_results`, read on
 * a client of the app's pool, parsed by its `types`) -> lib/claim/phase-result-json.ts
 * `phaseResultsRead` (`Object.entries` of a string) -> lib/phases/phases.ts `completedPhase`
 * (no own property `reserved`): lib/phases/phase-runner.service.ts runs the phase again. The
 * library's statements carry no `types` of their own (lib/transaction/request-transaction.ts
 * sends `{ name, text, values }`). The same with a global `pg.types.setTypeParser(3802, …)`.
 *
 * Docs quote: phases.md: "throw `RetryLaterError` and the client gets 503 with `Retry-After`,
 * nothing is stored, the lease is released, and its retry resumes after the last completed
 * phase"; "each external call is recorded in its own commit, so a takeover after a crash
 * resumes after it instead of running everything again".
 *
 * Severity: high (completed phases executed twice: a duplicate insert and a second external
 * call after a retry; nothing says why).
 *
 * Fails now: with the jsonb override, the retry answers 201 but `reserved` inserted 2 rows and
 * the PSP was called 2 times (1 and 1 without the override, the control).
 *
 * Controls: the same app and retry on a pool without the override (1 row, 1 PSP call); the
 * override itself is seen working on the app's own read (jsonb comes back as text).
 *
 * Suggested fix: give every statement of the library's own an explicit `types` (node-postgres'
 * default parsers, `{ getTypeParser: pgTypes.getTypeParser }` from a private `pg-types`
 * instance, or cast the columns it reads to text and parse them itself), so that neither a
 * pool's `types` nor a global `setTypeParser` reaches what the library reads of its rows.
 */
import { Body, Controller, HttpCode, Module, Post, type Type } from '@nestjs/common';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner, RetryLaterError } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

interface Stack {
  pool?: Pool;
  pspCalls: number;
  carrierDown: boolean;
}

function moduleOf(stack: Stack): Type {
  @Controller('orders')
  class OrdersController {
    constructor(private readonly phases: PhaseRunner) {}

    @Post()
    @HttpCode(201)
    @Idempotent()
    async pay(@Body() { sku }: { sku: string }) {
      await this.phases.run('reserved', async () => {
        await stack.pool!.query(`INSERT INTO orders (sku, meta) VALUES ($1, '{"a":1}')`, [sku]);
        return { reserved: true };
      });
      const charge = await this.phases.call(
        'charged',
        async () => {
          stack.pspCalls += 1;
          return { charge: `ch-${sku}` };
        },
        async (_manager, result) => result,
      );
      await this.phases.call(
        'shipped',
        async () => {
          if (stack.carrierDown) {
            stack.carrierDown = false;
            throw new RetryLaterError();
          }
          return { booked: true };
        },
        async (_manager, result) => result,
      );
      return this.phases.finish(async () => {
        const { rows } = await stack.pool!.query<{ meta: unknown }>(
          `SELECT meta FROM orders WHERE sku = $1`,
          [sku],
        );
        return { sku, charge: charge.charge, metaType: typeof rows[0].meta };
      });
    }
  }

  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        useFactory: () => ({ globalKeys: true, pool: stack.pool! }),
      }),
    ],
    controllers: [OrdersController],
  })
  class OrdersModule {}
  return OrdersModule;
}

/** The app's override: jsonb as the text PostgreSQL sent. */
const jsonbAsText = {
  getTypeParser: (oid: number, format?: string) =>
    oid === 3802
      ? (text: string) => text
      : (pg.types.getTypeParser as (o: number, f?: string) => unknown)(oid, format),
};

describe('adversary 105 pool: a jsonb type parser on the pool makes a retry run completed phases again', () => {
  const plain: Stack = { pspCalls: 0, carrierDown: true };
  const raw: Stack = { pspCalls: 0, carrierDown: true };
  let plainApp: PoolApp;
  let rawApp: PoolApp;
  const setup = async (owner: pg.Client) => {
    await owner.query(
      `CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL, meta jsonb NOT NULL)`,
    );
  };

  beforeAll(async () => {
    plainApp = await startPoolApp('adv105_pool_jsonb_plain', {
      module: moduleOf(plain),
      max: 4,
      usePool: (started) => {
        plain.pool = started;
      },
      setup,
    });
    rawApp = await startPoolApp('adv105_pool_jsonb_raw', {
      module: moduleOf(raw),
      max: 4,
      usePool: (started) => {
        // As `new Pool({ ..., types })`: read by each client the pool makes.
        (started.options as { types?: unknown }).types = jsonbAsText;
        raw.pool = started;
      },
      setup,
    });
  }, 90_000);

  afterAll(async () => {
    await plainApp?.close();
    await rawApp?.close();
  });

  async function payTwice(fixture: PoolApp, stack: Stack, sku: string) {
    const post = async () => {
      const answer = await request(fixture.app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', `key-${sku}`)
        .send({ sku })
        .timeout(20_000);
      return answer.status;
    };
    const first = await post();
    const retried = await post();
    const { rows } = await fixture.admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM orders WHERE sku = $1`,
      [sku],
    );
    return { first, retried, reservedRows: rows[0].n, pspCalls: stack.pspCalls };
  }

  it('control: without the override, the retry after the 503 resumes after the completed phases', async () => {
    expect(await payTwice(plainApp, plain, 'plain-1')).toEqual({
      first: 503,
      retried: 201,
      reservedRows: 1,
      pspCalls: 1,
    });
  }, 60_000);

  it('control: the override does what the app asked of it (its own jsonb read comes back as text)', async () => {
    const { rows } = await raw.pool!.query<{ meta: unknown }>(`SELECT '{"a":1}'::jsonb AS meta`);
    expect(typeof rows[0].meta).toBe('string');
  });

  it('a jsonb parser on the pool does not make the retry run completed phases again', async () => {
    expect(await payTwice(rawApp, raw, 'raw-1')).toEqual({
      first: 503,
      retried: 201,
      reservedRows: 1,
      pspCalls: 1,
    });
  }, 60_000);
});
