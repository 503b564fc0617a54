/**
 * Adversary 74: on TypeORM, a `dataSource.transaction()` begun inside another's callback (an
 * audit service with its own transaction, called from an order's) is a savepoint inside the
 * order's, and what it set for itself (`set_config('app.actor', …, true)`, `SET LOCAL
 * statement_timeout`) outlives its COMMIT: the order's own statements after it run under the
 * audit's settings. Without the library the audit's transaction runs on a connection of its
 * own, and its COMMIT ends them: the order's code never sees them.
 *
 *   await dataSource.transaction(async (manager) => {                  // the order's
 *     await manager.query(`INSERT INTO adv74b_rows (tag, what, actor)
 *                          VALUES ($1, 'order', current_setting('app.actor', true))`, [tag]);
 *     await audit.record(tag);   // dataSource.transaction(async (m) => {
 *                                //   await m.query(`SELECT set_config('app.actor', 'audit-bot', true)`);
 *                                //   await m.query(`INSERT … 'audit', current_setting('app.actor', true)`) })
 *     await manager.query(`INSERT INTO adv74b_rows (tag, what, actor)
 *                          VALUES ($1, 'line', current_setting('app.actor', true))`, [tag]);
 *   });
 *
 * The order's line is committed stamped `audit-bot` under a 201 (and replayed), where without
 * the library it has no actor. With `SET LOCAL statement_timeout = '200ms'` in the audit's
 * transaction, the order's 400 ms statement after it is cancelled: 503 `database_transient`,
 * "retry", and every retry meets the same 503.
 *
 * Why: `LazyTransaction`'s `commitFrom` (lib/data-layers/lazy-transaction.ts) puts back the
 * role, search path and settings only for the outermost nested transaction (`outermost`,
 * depth 2: `restoreNestedState(OUTERMOST_KEPT_AS)`, `this.nestedCommit.endingText`); one begun
 * beside another (`besideDepths`) gets only `new NestedCommit().endingText(true, …)`, which
 * closes its cursors and restores no setting (its settings were noted, by `keepSettings`, into
 * the outermost's `nestedCommit`, put back only when the order's transaction commits). And
 * `NestedIdentity.endedAt` forgets it, so nothing refuses the order's statements either.
 *
 * Expected (docs/guides/transactions.md): "So with any other setting its code sets for the
 * transaction inside it (`SET LOCAL statement_timeout = '300ms'` for one bounded step,
 * `set_config('app.tenant', …, true)` for row-level security): its value is read just before
 * that statement ... and put back at that commit, as Drizzle, Kysely, Prisma and TypeORM code
 * expects"; "So does TypeORM's `dataSource.transaction()` begun inside another's callback (not
 * through the callback's `manager`, which nests as without the library)" — a transaction
 * begun beside is one of its own without the library, and its COMMIT ends what it set.
 * "Never run in the wrong transaction", and data-layers.md refuses a statement rather than
 * run it "as that tenant".
 *
 * Control: without `@Idempotent()` (201, the line with no actor), and the same keyed program
 * whose audit sets nothing (201, no actor anywhere).
 *
 * Severity: high (a row committed, and its 201 stored and replayed, with another
 * transaction's tenant/actor; a bounded step's timeout turning every retry into a 503).
 *
 * Fails now: actor: '201 rows ["audit:audit-bot","line:audit-bot","order:-"]'; timeout:
 * '[{"status":503,"code":"database_transient"},{"status":503,"code":"database_transient"}]
 * rows []' (the two controls pass).
 *
 * Fixed: a transaction begun beside another keeps its role, session authorization and search
 * path before it starts (`keepNestedState(besideName)`) and has a `NestedCommit` of its own
 * (`besideCommits`, `commitOf`): its COMMIT puts them and its settings back.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body74 = { tag: string; actor?: boolean; bound?: boolean };

@Injectable()
class AuditService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** The audit's own transaction, as a service writes it. */
  async record(body: Body74) {
    await this.dataSource.transaction(async (manager) => {
      if (body.actor) await manager.query(`SELECT set_config('app.actor', 'audit-bot', true)`);
      if (body.bound) await manager.query(`SET LOCAL statement_timeout = '200ms'`);
      await manager.query(
        `INSERT INTO adv74b_rows (tag, what, actor)
         VALUES ($1, 'audit', current_setting('app.actor', true))`,
        [body.tag],
      );
    });
  }
}

@Injectable()
class OrderService {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly audit: AuditService,
  ) {}

  async place(body: Body74) {
    await this.dataSource.transaction(async (manager) => {
      await manager.query(
        `INSERT INTO adv74b_rows (tag, what, actor)
         VALUES ($1, 'order', current_setting('app.actor', true))`,
        [body.tag],
      );
      await this.audit.record(body);
      await manager.query(
        `INSERT INTO adv74b_rows (tag, what, actor)
         SELECT $1, 'line', current_setting('app.actor', true) FROM pg_sleep($2)`,
        [body.tag, body.bound ? 0.4 : 0],
      );
    });
    return { tag: body.tag };
  }
}

@Controller()
class OrdersController {
  constructor(private readonly orders: OrderService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return this.orders.place(body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return this.orders.place(body);
  }
}

describe('adversary 74: TypeORM, a transaction begun beside another leaves its settings to it', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_orm_beside_settings', {
      controllers: [OrdersController],
      providers: [OrderService, AuditService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv74b_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL, actor text)',
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const kept = async (tag: string) =>
    (
      await admin.query<{ what: string }>(
        `SELECT what || ':' || coalesce(nullif(actor, ''), '-') AS what FROM adv74b_rows
          WHERE tag = $1 ORDER BY what`,
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the order line has no actor; the bounded audit does not bound it', async () => {
    expect((await post('/plain', undefined, { tag: 'p1', actor: true })).status).toBe(201);
    expect(await kept('p1')).toEqual(['audit:audit-bot', 'line:-', 'order:-']);
    expect((await post('/plain', undefined, { tag: 'p2', bound: true })).status).toBe(201);
    expect(await kept('p2')).toEqual(['audit:-', 'line:-', 'order:-']);
  }, 20_000);

  it('control: keyed, the audit sets nothing: 201, no actor anywhere', async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0' })).status).toBe(201);
    expect(await kept('k0')).toEqual(['audit:-', 'line:-', 'order:-']);
  }, 20_000);

  it("set_config('app.actor', …, true) in the audit's transaction: the order's line is not stamped (or is refused)", async () => {
    const answer = await post('/keyed', 'k1', { tag: 'k1', actor: true });
    const rows = await kept('k1');
    const outcome =
      answer.status === 201 &&
      JSON.stringify(rows) === JSON.stringify(['audit:audit-bot', 'line:-', 'order:-'])
        ? 'as without the library'
        : answer.status === 500 && rows.length === 0
          ? 'refused'
          : `${answer.status} rows ${JSON.stringify(rows)}`;
    expect(['as without the library', 'refused']).toContain(outcome);
  }, 20_000);

  it("SET LOCAL statement_timeout in the audit's transaction: the order's slower statement is not cancelled", async () => {
    const tries: { status: number; code: unknown }[] = [];
    for (let attempt = 1; attempt <= 2; attempt += 1) {
      const answer = await post('/keyed', 'k2', { tag: 'k2', bound: true });
      tries.push({ status: answer.status, code: answer.body.code as unknown });
    }
    const rows = await kept('k2');
    const outcome =
      tries[0].status === 201 &&
      JSON.stringify(rows) === JSON.stringify(['audit:-', 'line:-', 'order:-'])
        ? 'as without the library'
        : tries[0].status === 500 && rows.length === 0
          ? 'refused'
          : `${JSON.stringify(tries)} rows ${JSON.stringify(rows)}`;
    expect(['as without the library', 'refused']).toContain(outcome);
  }, 20_000);
});
