/**
 * Adversary 74: on TypeORM, a write sent beside a nested transaction its code made READ ONLY
 * (`SET TRANSACTION READ ONLY` as the first statement of `dataSource.transaction()`, for a
 * report's consistent reads; the audit service's own `dataSource.query()` inside its callback)
 * runs inside it, and PostgreSQL refuses it (25006 "cannot execute INSERT in a read-only
 * transaction"): the audit service meets an error about a transaction it never made read
 * only, and the request answers a 500 that is stored and replayed. Without the library the
 * audit runs on a connection of its own and commits (201). The pool seam refuses exactly this
 * as it is sent, by name (`StatementBesideNestedTransactionError('read-only')`, round 73);
 * TypeORM's `NestedIdentity` has no such rule.
 *
 *   await dataSource.transaction(async (manager) => {
 *     await manager.query('SET TRANSACTION READ ONLY');         // a consistent report
 *     const [{ n }] = await manager.query('SELECT count(*) …');
 *     await audit.log(tag);      // dataSource.query('INSERT INTO adv74o_rows …'): 25006
 *     …
 *   });
 *
 * Why: `LazyTransaction`'s `queryFrom` (lib/data-layers/lazy-transaction.ts) notes the mode
 * (`readOnlyFrom`) but asks `refuseBesideIdentity` → `NestedIdentity.besideIdentity`
 * (lib/data-layers/nested-identity.ts), which knows only `setIdentity` and `localSettings`;
 * the pool seam's `PoolTransaction.refuseBesideIdentity` also refuses beside a savepoint whose
 * `readOnly` is set. The write goes to PostgreSQL, fails inside the nested transaction, and
 * `noteFailure` takes the 25006 for the handler's own mistake.
 *
 * Expected (docs/guides/transactions.md): a statement beside an open `dataSource.transaction()`
 * "runs inside that nested transaction: kept if it commits"; "What cannot be kept apart there
 * is refused, and the request rolls back (500), rather than differ in silence"; the promise:
 * "a statement the library cannot place correctly is refused with a clear error". So: 201 with
 * the audit (as without the library), or the audit refused with
 * `StatementBesideNestedTransactionError`, not PostgreSQL's read-only error.
 *
 * Control: without `@Idempotent()`: 201, both rows; keyed, the nested transaction not read
 * only: 201, both rows.
 *
 * Severity: low (a correct program answers a stored 500 with an error naming a read-only
 * transaction its code never made; nothing lost or duplicated).
 *
 * Fails now: 'Received: "500, rows [], the audit met ["QueryFailedError"]"' (25006; the 500 is
 * stored and replayed); the two controls pass.
 *
 * Fixed: `NestedTransaction.readOnly`: refused beside it with
 * `StatementBesideNestedTransactionError('read-only')`, as on the pool seam.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/** What the audit service's write met, by the error's name. */
const auditErrors: string[] = [];

type Body74 = { tag: string; readOnly?: boolean; bestEffort?: boolean };

@Injectable()
class AuditService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async log(tag: string, what: string, bestEffort?: boolean) {
    const write = this.dataSource.query(`INSERT INTO adv74o_rows (tag, what) VALUES ($1, $2)`, [
      tag,
      what,
    ]);
    if (bestEffort) await write.catch(() => undefined);
    else {
      await write.catch((error: Error) => {
        auditErrors.push(error.name);
        throw error;
      });
    }
  }
}

@Injectable()
class ReportService {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly audit: AuditService,
  ) {}

  async export(body: Body74) {
    await this.dataSource.query(`INSERT INTO adv74o_rows (tag, what) VALUES ($1, 'export')`, [
      body.tag,
    ]);
    const total = await this.dataSource.transaction(async (manager) => {
      if (body.readOnly) await manager.query('SET TRANSACTION READ ONLY');
      const [{ n }] = await manager.query<{ n: number }[]>(
        'SELECT count(*)::int AS n FROM adv74o_rows',
      );
      await this.audit.log(body.tag, 'audit', body.bestEffort);
      const [{ m }] = await manager.query<{ m: number }[]>(
        'SELECT count(*)::int AS m FROM adv74o_rows',
      );
      return n + m;
    });
    return { tag: body.tag, total };
  }
}

@Controller()
class ReportsController {
  constructor(private readonly reports: ReportService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return this.reports.export(body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return this.reports.export(body);
  }
}

describe('adversary 74: TypeORM, a write beside a READ ONLY nested transaction', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_orm_read_only_beside', {
      controllers: [ReportsController],
      providers: [ReportService, AuditService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv74o_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv74o_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the audit commits on its own: 201, both rows', async () => {
    expect((await post('/plain', undefined, { tag: 'p1', readOnly: true })).status).toBe(201);
    expect(await kept('p1')).toEqual(['audit', 'export']);
  }, 20_000);

  it('control: keyed, the nested transaction not read only: 201, both rows', async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0' })).status).toBe(201);
    expect(await kept('k0')).toEqual(['audit', 'export']);
  }, 20_000);

  it("keyed, read only: the audit kept (201), or refused by name; not PostgreSQL's 25006", async () => {
    auditErrors.length = 0;
    const answer = await post('/keyed', 'k1', { tag: 'k1', readOnly: true });
    const rows = await kept('k1');
    const outcome =
      answer.status === 201 && JSON.stringify(rows) === '["audit","export"]'
        ? 'as without the library, or refused by name'
        : answer.status === 500 &&
            rows.length === 0 &&
            JSON.stringify(auditErrors) === '["StatementBesideNestedTransactionError"]'
          ? 'as without the library, or refused by name'
          : `${answer.status}, rows ${JSON.stringify(rows)}, the audit met ${JSON.stringify(auditErrors)}`;
    expect(outcome).toBe('as without the library, or refused by name');
  }, 20_000);
});
