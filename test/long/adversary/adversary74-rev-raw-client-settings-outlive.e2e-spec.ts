/**
 * Adversary 74 (review of 8c68078): on TypeORM, the node-postgres client a view hands out
 * (`await manager.queryRunner.connect()`, `LazyTransaction.clientOf`) is now "judged as the
 * view", but what its statements leave that the nested transaction's own COMMIT would end is
 * still never noted. A bulk importer that runs its transaction through the pg client (as
 * `pg-copy-streams` and raw drivers need it):
 *
 *   await dataSource.transaction(async (manager) => {
 *     const client = (await manager.queryRunner!.connect()) as PoolClient;
 *     await client.query(`SELECT set_config('app.tenant', $1, true)`, [tenant]);
 *     await client.query(`CREATE TEMP TABLE adv74t_stage (what text) ON COMMIT DROP`);
 *     await client.query(`INSERT INTO adv74t_stage VALUES ('import')`);
 *     await client.query(`INSERT INTO adv74t_rows (tag, what) SELECT $1, what FROM adv74t_stage`, [tag]);
 *   });
 *   await dataSource.query(`INSERT INTO adv74t_rows (tag, what) VALUES ($1, 'after')`, [tag]);
 *
 *   - the tenant outlives the nested COMMIT: the request's own row after it is committed
 *     stamped 'acme' (row-level security's tenant) under a stored 201, where without the
 *     library it has none;
 *   - the `ON COMMIT DROP` staging table outlives it: a second batch in the same request
 *     fails (42P07 "relation adv74t_stage already exists"): 500 on every try, for code that
 *     is correct without the library.
 *
 * The same statements through the callback's `manager.query()` are noted and put back at that
 * COMMIT (control).
 *
 * Why: lib/data-layers/lazy-transaction.ts, `clientOf`: `judged` calls
 * `refuseBesideIdentity` and `nested.markBeside`, then `query.apply(client, args)`; it never
 * calls `keepSettings` (`this.commitOf(from).before(…)`, which `queryFrom` runs for a view's
 * statement at depth > 1), so `NestedCommit` never learns of the setting, the temporary table
 * or a declared cursor, and `commitFrom`'s `endingText` puts nothing back. (The judging also
 * skips `refuseBehindStream`/`refuseBesidePhase`.)
 *
 * Expected (docs/guides/transactions.md): "So with any other setting its code sets for the
 * transaction inside it (... `set_config('app.tenant', …, true)` for row-level security): its
 * value is read just before that statement ... and put back at that commit, as ... TypeORM code
 * expects"; the commit's own words: the client "runner.connect() on a view hands out" is
 * "judged as the view" "as through its `query()`". Never "in the wrong transaction".
 *
 * Control: without `@Idempotent()` (201: import:acme, after:-; two batches: 201); keyed, the
 * same statements through `manager.query()` (201: import:acme, after:-).
 *
 * Fails now: tenant: '201 rows ["after:acme","import:acme"]'; two batches: 500, rows [] (the
 * two controls pass).
 *
 * Severity: high (a row committed under another scope's tenant with a stored 201); medium for
 * the temporary table (a false 500 on every try).
 *
 * Suggested fix: in `clientOf`'s `judged`, do what `queryFrom` does for a view's statement
 * inside its nested transaction: `await keepSettings(view, args)` before sending (the query
 * then returns a promise chained on it; a submittable or callback form sent once it is done),
 * and `refuseBehindStream()`.
 *
 * Fixed: the client `clientOf` hands out notes what a statement leaves for its nested
 * transaction's COMMIT first (`keepSettingsOf`, as `queryFrom`'s `keepSettings`).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client, type PoolClient } from 'pg';
import request from 'supertest';
import { DataSource, type EntityManager } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body74 = { tag: string; throughManager?: boolean; batches?: number };

@Injectable()
class Importer {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async batch(manager: EntityManager, body: Body74) {
    const run: (text: string, values?: unknown[]) => Promise<unknown> = body.throughManager
      ? (text, values) => manager.query(text, values)
      : await (async () => {
          const client = (await manager.queryRunner!.connect()) as PoolClient;
          return (text: string, values?: unknown[]) => client.query(text, values);
        })();
    await run(`SELECT set_config('app.tenant', $1, true)`, ['acme']);
    await run(`CREATE TEMP TABLE adv74t_stage (what text) ON COMMIT DROP`);
    await run(`INSERT INTO adv74t_stage VALUES ('import')`);
    await run(`INSERT INTO adv74t_rows (tag, what) SELECT $1, what FROM adv74t_stage`, [body.tag]);
  }

  async load(body: Body74) {
    for (let batch = 0; batch < (body.batches ?? 1); batch += 1) {
      await this.dataSource.transaction((manager) => this.batch(manager, body));
    }
    // The request's own bookkeeping after the import's transactions: no tenant of its own.
    await this.dataSource.query(`INSERT INTO adv74t_rows (tag, what) VALUES ($1, 'after')`, [
      body.tag,
    ]);
    return { tag: body.tag };
  }
}

@Controller()
class ImportsController {
  constructor(private readonly importer: Importer) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return this.importer.load(body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return this.importer.load(body);
  }
}

describe("adversary 74 (review): TypeORM, what a view's pg client sets outlives its nested COMMIT", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_rev_raw_settings', {
      controllers: [ImportsController],
      providers: [Importer],
      max: 6,
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv74t_rows (
            id serial PRIMARY KEY,
            tag text NOT NULL,
            what text NOT NULL,
            tenant text NOT NULL DEFAULT coalesce(nullif(current_setting('app.tenant', true), ''), '-'))`);
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await admin.query<{ row: string }>(
        `SELECT what || ':' || tenant AS row FROM adv74t_rows WHERE tag = $1 ORDER BY 1`,
        [tag],
      )
    ).rows.map((row) => row.row);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the tenant and the staging table end with the import', async () => {
    expect((await post('/plain', undefined, { tag: 'p1' })).status).toBe(201);
    expect(await kept('p1')).toEqual(['after:-', 'import:acme']);
    expect((await post('/plain', undefined, { tag: 'p2', batches: 2 })).status).toBe(201);
    expect(await kept('p2')).toEqual(['after:-', 'import:acme', 'import:acme']);
  }, 20_000);

  it("control: keyed, the same statements through the callback's manager.query()", async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0', throughManager: true })).status).toBe(201);
    expect(await kept('k0')).toEqual(['after:-', 'import:acme']);
    const two = { tag: 'k0b', throughManager: true, batches: 2 };
    expect((await post('/keyed', 'k0b', two)).status).toBe(201);
    expect(await kept('k0b')).toEqual(['after:-', 'import:acme', 'import:acme']);
  }, 20_000);

  it("keyed, through the view's pg client: the request's row after it has no tenant (or refused)", async () => {
    const answer = await post('/keyed', 'k1', { tag: 'k1' });
    const rows = await kept('k1');
    const outcome =
      answer.status === 201 && JSON.stringify(rows) === '["after:-","import:acme"]'
        ? 'as without the library'
        : answer.status === 500 && rows.length === 0
          ? 'refused'
          : `${answer.status} rows ${JSON.stringify(rows)}`;
    expect(['as without the library', 'refused']).toContain(outcome);
  }, 20_000);

  it("keyed, two batches through the view's pg client: the ON COMMIT DROP table ends with each", async () => {
    const answer = await post('/keyed', 'k2', { tag: 'k2', batches: 2 });
    expect({ status: answer.status, rows: await kept('k2') }).toEqual({
      status: 201,
      rows: ['after:-', 'import:acme', 'import:acme'],
    });
  }, 20_000);
});
