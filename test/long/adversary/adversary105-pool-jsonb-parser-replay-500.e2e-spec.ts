/**
 * Fixed (session of 2026-12-07): every statement of the library's own carries node-postgres' per-
 * query `types` of its own (lib/connection/library-types.ts: fixed parsers for json, jsonb, bytea,
 * bool, ints, floats, timestamps and arrays, the text for every other type), put on at the choke
 * points (lib/connection/deadline.ts `queryWithDeadline`, lib/connection/session-state.ts
 * `runSurrounded`, so `libraryStatement`, the claims, takeovers, fenced commits and the schema
 * check; the BEGIN and level reads of lib/transaction/request-transaction.ts, the partitioned
 * store's maintenance, the CLI's client, the jobs' schema read): neither a pool's `types` nor
 * `pg.types.setTypeParser` reaches what the library reads; the app's own statements keep the app's
 * parsers. Cases added here for bytea (17) on the pool, and for jsonb and bytea set on the global
 * registry.
 *
 * Adversary 105 (pool): a pool whose jsonb type parser keeps jsonb as text (`types` on the Pool's
 * config, or `pg.types.setTypeParser(3802, …)`) answers every retry read from the database
 * with a bare 500: the stored answer is never replayed, and a reused key with another body gets
 * that 500 instead of 422. The first request commits and answers as it should.
 *
 * A retry is read from the database whenever it is not in this process's replay cache: it
 * reaches another instance (any deployment of more than one), or comes after
 * `replayCacheTtlMs` (60 s). Here `replayCacheSize: 0` stands for that.
 *
 * User code:
 *   const pool = new Pool({ ..., types: { getTypeParser: (oid, format) =>
 *     oid === 3802 ? (text) => text : pg.types.getTypeParser(oid, format) } });
 *   IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })
 *   @Post() @Idempotent() create(@Body() { sku }) { await pool.query('INSERT …'); return { sku }; }
 *
 * Code path: lib/claim/postgres-statements.ts CLAIM's `FOUND_ROW` (`k.response_headers`, jsonb)
 * read by lib/claim/postgres-claim.store.ts on a client of the app's pool, so parsed by the
 * pool's `types`: a string where the replay expects the headers object, and
 * lib/answer/sealing-claim.store.ts `replayed` throws `TypeError: Cannot use 'in' operator to
 * search for '$sealed' in {"content-type": …}` (Nest's bare 500; the same string
 * for `phase_results`: see adversary105-pool-jsonb-parser-reruns-phases). The library's
 * statements carry no `types` of their own.
 *
 * Docs quote: README/requests-and-replays: a retry with the same key replays the stored answer;
 * a key reused with another body answers 422 `key_mismatch`; data-layers.md: the module is
 * given the app's pool, "Outside an idempotent request the pool is exactly as it was".
 *
 * Severity: high (the stored answer is lost to every retry that reads it from the database:
 * a 500 that is not the answer, and no 422 for a reused key).
 *
 * Fails now: first 201; the replay answers 500 `Internal server error` (not the stored 201),
 * and the reused key with another body 500 (not 422).
 *
 * Seen in review, not in this file: a bytea parser (oid 17, `(text) => text`, the hex text) on
 * the pool does worse: every replay, the reused key, the 409 of a concurrent retry and the
 * retry after a 503 answer a bare 500 (the fingerprint and the stored body are bytea). Parsers
 * of int8 (BigInt, parseInt), numeric, float8, timestamp(tz) held, with the cache off too.
 *
 * Controls: the same app on a pool without the override replays 201 and answers 422.
 *
 * Suggested fix: give every statement of the library's own an explicit `types` (node-postgres'
 * default parsers) or cast the jsonb columns it reads to text and parse them itself.
 */
import { Body, Controller, HttpCode, Module, Post, type Type } from '@nestjs/common';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

function moduleOf(stack: { pool?: Pool }): Type {
  @Controller('orders')
  class OrdersController {
    @Post()
    @HttpCode(201)
    @Idempotent()
    async create(@Body() { sku }: { sku: string }) {
      await stack.pool!.query(`INSERT INTO orders (sku) VALUES ($1)`, [sku]);
      return { sku };
    }
  }

  @Module({
    imports: [
      IdempotencyModule.forRootAsync({
        // A retry that reaches another instance, or comes after the cache's TTL.
        useFactory: () => ({ globalKeys: true, pool: stack.pool!, replayCacheSize: 0 }),
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

/** The app's override: bytea as the hex text PostgreSQL sent (the fingerprint, the body). */
const byteaAsText = {
  getTypeParser: (oid: number, format?: string) =>
    oid === 17
      ? (text: string) => text
      : (pg.types.getTypeParser as (o: number, f?: string) => unknown)(oid, format),
};

describe('adversary 105 pool: a jsonb type parser on the pool turns every replay read from the database into a 500', () => {
  const plain: { pool?: Pool } = {};
  const raw: { pool?: Pool } = {};
  let plainApp: PoolApp;
  let rawApp: PoolApp;
  const bytes: { pool?: Pool } = {};
  const global: { pool?: Pool } = {};
  let bytesApp: PoolApp;
  let globalApp: PoolApp;
  const setup = async (owner: pg.Client) => {
    await owner.query(`CREATE TABLE orders (id bigserial PRIMARY KEY, sku text NOT NULL)`);
  };

  beforeAll(async () => {
    plainApp = await startPoolApp('adv105_pool_jsonb_replay_plain', {
      module: moduleOf(plain),
      max: 4,
      usePool: (started) => {
        plain.pool = started;
      },
      setup,
    });
    rawApp = await startPoolApp('adv105_pool_jsonb_replay_raw', {
      module: moduleOf(raw),
      max: 4,
      usePool: (started) => {
        // As `new Pool({ ..., types })`: read by each client the pool makes.
        (started.options as { types?: unknown }).types = jsonbAsText;
        raw.pool = started;
      },
      setup,
    });
    bytesApp = await startPoolApp('adv105_pool_bytea_replay_raw', {
      module: moduleOf(bytes),
      max: 4,
      usePool: (started) => {
        (started.options as { types?: unknown }).types = byteaAsText;
        bytes.pool = started;
      },
      setup,
    });
    globalApp = await startPoolApp('adv105_pool_jsonb_replay_global', {
      module: moduleOf(global),
      max: 4,
      usePool: (started) => {
        global.pool = started;
      },
      setup,
    });
  }, 120_000);

  afterAll(async () => {
    await plainApp?.close();
    await rawApp?.close();
    await bytesApp?.close();
    await globalApp?.close();
  });

  async function createReplayReuse(fixture: PoolApp) {
    const post = async (sku: string) => {
      const answer = await request(fixture.app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', 'key-1')
        .send({ sku })
        .timeout(20_000);
      const body = answer.body as { sku?: string; code?: string; message?: string };
      return `${answer.status} ${body.sku ?? body.code ?? body.message}`;
    };
    const first = await post('a');
    const replayed = await post('a');
    const reused = await post('b');
    const { rows } = await fixture.admin.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM orders`,
    );
    return { first, replayed, reused, rows: rows[0].n };
  }

  it('control: without the override the retry replays the stored answer, and a reused key is 422', async () => {
    expect(await createReplayReuse(plainApp)).toEqual({
      first: '201 a',
      replayed: '201 a',
      reused: '422 key_mismatch',
      rows: 1,
    });
  }, 60_000);

  it('a jsonb parser on the pool does not stop the stored answer from being replayed', async () => {
    expect(await createReplayReuse(rawApp)).toEqual({
      first: '201 a',
      replayed: '201 a',
      reused: '422 key_mismatch',
      rows: 1,
    });
  }, 60_000);

  it('a bytea parser on the pool does not stop the stored answer from being replayed', async () => {
    expect(await createReplayReuse(bytesApp)).toEqual({
      first: '201 a',
      replayed: '201 a',
      reused: '422 key_mismatch',
      rows: 1,
    });
  }, 60_000);

  it('global parsers (pg.types.setTypeParser of jsonb and bytea) do not either', async () => {
    const was = [3802, 17].map((oid) => [oid, pg.types.getTypeParser(oid, 'text')] as const);
    pg.types.setTypeParser(3802, (text: string) => text);
    pg.types.setTypeParser(17, (text: string) => text);
    try {
      expect(await createReplayReuse(globalApp)).toEqual({
        first: '201 a',
        replayed: '201 a',
        reused: '422 key_mismatch',
        rows: 1,
      });
    } finally {
      for (const [oid, parser] of was) pg.types.setTypeParser(oid, parser);
    }
  }, 60_000);
});
