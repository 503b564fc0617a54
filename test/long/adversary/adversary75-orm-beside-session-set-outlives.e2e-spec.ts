/**
 * Adversary 75: on TypeORM, a `dataSource.transaction()` begun inside another's callback (an
 * audit service with its own transaction, called from an order's) that sets a custom setting
 * for its session (`SET app.actor = 'audit-bot'`, no `LOCAL`) leaves it to the order's
 * transaction: the order's statements after the audit's commit run under it, and its line is
 * committed stamped with the audit's actor under a stored 201. Without the library the audit runs on a
 * connection of its own (the order's holds its own connection meanwhile): the order's code
 * never sees the audit's session.
 *
 *   await dataSource.transaction(async (manager) => {                  // the order's
 *     await audit.record(tag);  // dataSource.transaction(async (m) => {
 *                               //   await m.query(`SET app.actor = 'audit-bot'`);
 *                               //   await m.query(`INSERT … 'audit', current_setting('app.actor', true)`) })
 *     await manager.query(`INSERT INTO adv75s_rows (tag, what, actor)
 *                          VALUES ($1, 'line', current_setting('app.actor', true))`, [tag]);
 *   });
 *
 * Why: round 74 gave a transaction begun beside another its own put-back
 * (`LazyTransaction.commitFrom`, `besideDepths`/`besideCommits`): `restoreNestedState`
 * (role, session authorization, search path) and `NestedCommit.endingText`, whose settings are
 * only those `localSettingsOf` (lib/transaction/sql/sql-text.ts) counts: `SET LOCAL` and
 * `set_config(…, true)`. A session `SET` of a custom setting is neither refused
 * (`sessionSettingOf` refuses only the role, session authorization, search path, the
 * transaction defaults and `standard_conforming_strings`) nor noted: `NestedIdentity.besideIdentity`
 * sees no setting (`localSettingsOf` is empty), and the savepoint's `RELEASE` keeps the
 * session value, so it lasts into the enclosing transaction of the other code (and to the
 * request's COMMIT and beyond, on the pooled connection).
 *
 * Expected (docs/guides/transactions.md): "So does TypeORM's `dataSource.transaction()` begun
 * inside another's callback (not through the callback's `manager`, which nests as without the
 * library): its COMMIT puts back the role, search path and settings it began with"; "What
 * cannot be kept apart there is refused, and the request rolls back (500), rather than differ
 * in silence". The docs refuse only the role, session authorization and search path set for
 * the session (`SessionSettingRefusedError`), so a custom setting's session `SET` is allowed
 * usage: either its value is put back at the audit's COMMIT (201, the order's line with no
 * actor) or the statement is refused (500, nothing kept).
 *
 * Control: without `@Idempotent()` (201, the order's line with no actor), and the same keyed
 * program whose audit uses `SET LOCAL` (201, no actor on the line: round 74's fix holds).
 *
 * Severity: medium (a row of the order's code committed, and its 201 stored,
 * under a setting of another transaction's: an actor, a tenant read by row-level security
 * policies with `current_setting('app.tenant')`).
 *
 * Fails now: expect(['as without the library', 'refused']).toContain(outcome): Expected value:
 * '201 rows ["audit:audit-k1","line:audit-k1","order:-"]'. The two controls pass.
 *
 * Suggested fix: keep the values of the settings a session `SET` (and `set_config(…, false)`,
 * `RESET`) changes inside a nested transaction begun beside another, as `NestedCommit.before`
 * does for local ones, and put them back at its COMMIT; or refuse a session setting inside a
 * nested transaction of the request (as for the role) with `SessionSettingRefusedError`.
 *
 * Fixed: a nested transaction begun beside another notes the settings its code sets for the
 * session too (`sessionSettingsOf`, lib/transaction/sql/sql-text.ts: `SET name` without
 * `LOCAL`, `SET … TO DEFAULT`, `RESET name`, `set_config(…, false)`), and its COMMIT puts
 * them back with the local ones (`NestedCommit` made with `sessionToo` for `besideCommits`,
 * lib/data-layers/nested-commit.ts `note`; `LazyTransaction.ensureRunner`'s `startNow`).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body75 = { tag: string; local?: boolean };

@Injectable()
class AuditService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** The audit's own transaction, as a service writes it. */
  async record(body: Body75) {
    await this.dataSource.transaction(async (manager) => {
      // Each request's own value (a session SET takes no parameter; the tag is checked).
      if (!/^[a-z0-9]+$/.test(body.tag)) throw new Error('tag');
      const scope = body.local ? 'LOCAL ' : '';
      await manager.query(`SET ${scope}app.actor = 'audit-${body.tag}'`);
      await manager.query(
        `INSERT INTO adv75s_rows (tag, what, actor)
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

  async place(body: Body75) {
    await this.dataSource.transaction(async (manager) => {
      await manager.query(
        `INSERT INTO adv75s_rows (tag, what, actor)
         VALUES ($1, 'order', current_setting('app.actor', true))`,
        [body.tag],
      );
      await this.audit.record(body);
      await manager.query(
        `INSERT INTO adv75s_rows (tag, what, actor)
         VALUES ($1, 'line', current_setting('app.actor', true))`,
        [body.tag],
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
  keyed(@Body() body: Body75) {
    return this.orders.place(body);
  }

  @Post('plain')
  plain(@Body() body: Body75) {
    return this.orders.place(body);
  }
}

describe('adversary 75: TypeORM, a session SET in a transaction begun beside another outlives it', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75_orm_beside_session_set', {
      controllers: [OrdersController],
      providers: [OrderService, AuditService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75s_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL, actor text)',
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  /** `what:actor` by `what`, `-` for no actor. */
  const kept = async (tag: string) =>
    (
      await admin.query<{ what: string }>(
        `SELECT what || ':' || coalesce(nullif(actor, ''), '-') AS what FROM adv75s_rows
          WHERE tag = $1 ORDER BY what`,
        [tag],
      )
    ).rows.map((row) => row.what);

  /**
   * As without the library: the audit's row has its own actor, and the order's line was
   * written under what the order's row was (the order's own session, whatever a pooled
   * connection kept from an earlier request), never the audit's.
   */
  const outcomeOf = (status: number, tag: string, rows: string[]) => {
    const [audit, line, order] = rows;
    if (status === 500 && rows.length === 0) return 'refused';
    const own = `audit-${tag}`;
    return status === 201 &&
      rows.length === 3 &&
      audit === `audit:${own}` &&
      line.slice('line:'.length) === order.slice('order:'.length) &&
      line !== `line:${own}`
      ? 'as without the library'
      : `${status} rows ${JSON.stringify(rows)}`;
  };

  const post = (path: string, key: string | undefined, body: Body75) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it("control: keyed, the audit sets it with SET LOCAL: 201, the line not stamped with the audit's", async () => {
    const answer = await post('/keyed', 'k0', { tag: 'k0', local: true });
    expect(outcomeOf(answer.status, 'k0', await kept('k0'))).toBe('as without the library');
  }, 20_000);

  it("keyed, SET app.actor (the session's) in the audit's transaction: the order's line is not stamped (or is refused)", async () => {
    const answer = await post('/keyed', 'k1', { tag: 'k1' });
    const rows = await kept('k1');
    expect(['as without the library', 'refused']).toContain(outcomeOf(answer.status, 'k1', rows));
  }, 20_000);

  // Last: its audit's session SET stays on a pooled connection (as without the library).
  it("control: without @Idempotent(), the order line is not stamped with the audit's actor", async () => {
    const answer = await post('/plain', undefined, { tag: 'p1' });
    expect(outcomeOf(answer.status, 'p1', await kept('p1'))).toBe('as without the library');
  }, 20_000);
});
