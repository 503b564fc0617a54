/**
 * Adversary 74 (review of 8c68078): on TypeORM, a `dataSource.transaction()` begun beside
 * another (an audit service's own transaction, started from an order's callback) now puts
 * back, at its COMMIT, the role and search path it began with. That restore also undoes what
 * the ENCLOSING transaction's code set meanwhile: the order's `SET LOCAL search_path TO
 * tenant, public` (the schema-per-tenant recipe), sent while the audit's transaction is open,
 * is reverted when the audit commits, and the order's next INSERT lands silently in
 * `public.adv74r_items`, another tenant's table, under a stored 201.
 *
 *   await dataSource.transaction(async (manager) => {            // the order's
 *     const audit = this.audit.record(tag, gate);               // its own dataSource.transaction,
 *                                                               // awaiting something slower
 *     await manager.query('SET LOCAL search_path TO adv74r_tenant, public');
 *     await manager.query("INSERT INTO adv74r_items (tag, what) VALUES ($1, 'first')", [tag]);
 *     await audit;                                              // its COMMIT
 *     await manager.query("INSERT INTO adv74r_items (tag, what) VALUES ($1, 'second')", [tag]);
 *   });
 *
 * Without the library the audit's transaction is on a connection of its own: its COMMIT
 * touches nothing of the order's, and both items are in the tenant's schema. With the library
 * the second item is committed in public's table (and the 201 stored and replayed).
 *
 * Why: `LazyTransaction` (lib/data-layers/lazy-transaction.ts), `startTransaction` on a view:
 * `if (beside) await internals.query(keepNestedState(besideName(depth + 1)))` keeps the role
 * and search path as they are when the audit's transaction begins; `commitFrom`'s
 * `afterRelease` for `besideDepths` sends `restoreNestedState(besideName(depth))` after its
 * RELEASE: it sets `search_path` back to what it was kept at, whoever changed it since. The
 * order's `SET LOCAL search_path` (the enclosing view's own statement, run inside the audit's
 * savepoint on the one connection) is not refused (`NestedIdentity.besideIdentity` only
 * refuses beside a transaction that set its own identity; it marks the order's), and nothing
 * re-applies it after the restore.
 *
 * Expected (docs/guides/transactions.md): "So does TypeORM's `dataSource.transaction()` begun
 * inside another's callback ...: its COMMIT puts back the role, search path and settings it
 * began with" — what IT set, as its own COMMIT would end; its own COMMIT never touches the
 * enclosing transaction's search path. The promise: "never in the wrong transaction"; a
 * statement the library cannot place is refused with a clear error, not run as another
 * tenant.
 *
 * Control: without `@Idempotent()` (201, both items in the tenant's schema); keyed with the
 * audit's transaction awaited before the order sets its search path (201, both items in the
 * tenant's schema). (Setting it before the audit begins is refused, as documented: the audit
 * would run beside a nested transaction that set its search path.)
 *
 * Fails now: '201 rows ["audit","public:second","tenant:first"]' (the two controls pass).
 *
 * Severity: high (a row silently committed into another schema's table, 201 stored).
 *
 * Suggested fix: restore at the beside-begun COMMIT only what that transaction's own code set
 * (note identity changes per owner, as settings are in `besideCommits`), or refuse, with
 * `StatementBesideNestedTransactionError(true)`, an identity change of another view's code
 * while a transaction begun beside it is open; or re-read the enclosing view's identity after
 * the RELEASE if its code changed it meanwhile.
 *
 * Fixed: a statement that sets the role, search path or a setting inside another code's nested
 * transaction (the innermost open one is not its own) is refused as it is sent with
 * `StatementBesideNestedTransactionError('sets-beside')` (`NestedIdentity.besideIdentity`): the
 * refusal, not a silent wrong schema. The test accepts 'refused, nothing kept' as its header's
 * alternative.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body74 = { tag: string; auditFirst?: boolean };

/** Resolved by the order's code: the audit's transaction awaits it (an external call, a lock). */
interface Gate {
  opened: () => void;
  proceed: Promise<void>;
}

@Injectable()
class AuditService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  /** The audit's own transaction, as a service writes it. */
  async record(tag: string, gate?: Gate) {
    await this.dataSource.transaction(async (manager) => {
      await manager.query(`INSERT INTO public.adv74r_audit (tag) VALUES ($1)`, [tag]);
      gate?.opened();
      await gate?.proceed;
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
    const path = 'SET LOCAL search_path TO adv74r_tenant, public';
    const insert = 'INSERT INTO adv74r_items (tag, what) VALUES ($1, $2)';
    await this.dataSource.transaction(async (manager) => {
      if (body.auditFirst) {
        await this.audit.record(body.tag);
        await manager.query(path);
        await manager.query(insert, [body.tag, 'first']);
        await manager.query(insert, [body.tag, 'second']);
        return;
      }
      let opened!: () => void;
      let proceed!: () => void;
      const isOpen = new Promise<void>((resolve) => (opened = resolve));
      const gate: Gate = { opened, proceed: new Promise<void>((resolve) => (proceed = resolve)) };
      const audit = this.audit.record(body.tag, gate);
      await isOpen;
      await manager.query(path);
      await manager.query(insert, [body.tag, 'first']);
      proceed();
      await audit;
      await manager.query(insert, [body.tag, 'second']);
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

describe('adversary 74 (review): a beside-begun COMMIT puts back the enclosing one’s search path', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_rev_beside_path', {
      controllers: [OrdersController],
      providers: [OrderService, AuditService],
      max: 6,
      setup: async (admin) => {
        await admin.query(`
          CREATE SCHEMA adv74r_tenant;
          CREATE TABLE public.adv74r_items (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL);
          CREATE TABLE adv74r_tenant.adv74r_items (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL);
          CREATE TABLE public.adv74r_audit (id serial PRIMARY KEY, tag text NOT NULL);`);
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
        `SELECT 'tenant:' || what AS row FROM adv74r_tenant.adv74r_items WHERE tag = $1
         UNION ALL SELECT 'public:' || what FROM public.adv74r_items WHERE tag = $1
         UNION ALL SELECT 'audit' FROM public.adv74r_audit WHERE tag = $1
         ORDER BY 1`,
        [tag],
      )
    ).rows.map((row) => row.row);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), both items are in the tenant’s schema', async () => {
    expect((await post('/plain', undefined, { tag: 'p1' })).status).toBe(201);
    expect(await kept('p1')).toEqual(['audit', 'tenant:first', 'tenant:second']);
  }, 20_000);

  it('control: keyed, the audit awaited before the search path is set: both in the tenant’s schema', async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0', auditFirst: true })).status).toBe(201);
    expect(await kept('k0')).toEqual(['audit', 'tenant:first', 'tenant:second']);
  }, 20_000);

  it('keyed, the search path set while the audit is open: its COMMIT does not revert it (or refused)', async () => {
    const answer = await post('/keyed', 'k1', { tag: 'k1' });
    const rows = await kept('k1');
    const outcome =
      answer.status === 201 &&
      JSON.stringify(rows) === JSON.stringify(['audit', 'tenant:first', 'tenant:second'])
        ? 'as without the library'
        : answer.status === 500 && rows.length === 0
          ? 'refused'
          : `${answer.status} rows ${JSON.stringify(rows)}`;
    expect(['as without the library', 'refused']).toContain(outcome);
  }, 20_000);
});
