/**
 * Adversary 74 (review of 8c68078): on TypeORM, a plain READ beside a nested transaction its
 * code made READ ONLY is now refused (`StatementBesideNestedTransactionError('read-only')`,
 * "where its write is refused"), and the request with it: a 500 stored and replayed on every
 * try. A report that reads consistently (`SET TRANSACTION READ ONLY` first in its
 * `dataSource.transaction()`) and looks up a label through a service's own repository or
 * `dataSource.query()` (not the callback's manager) is an ordinary, correct program:
 *
 *   await dataSource.transaction(async (manager) => {
 *     await manager.query('SET TRANSACTION READ ONLY');                 // a consistent report
 *     const [{ n }] = await manager.query('SELECT count(*) AS n FROM adv74ro_orders');
 *     const label = await labels.of('orders');   // dataSource.query('SELECT label FROM …')
 *     return { label, n };
 *   });
 *
 * Without the library the label's read runs on a connection of its own and answers (201).
 * Before 8c68078 the library ran it inside the nested transaction, where a read in a
 * read-only transaction simply answers (201). Now: 500, for a read that loses nothing and
 * meets nothing a read-only mode changes.
 *
 * Why: lib/data-layers/nested-identity.ts, `NestedIdentity.besideIdentity`: `if
 * (others.some((nested) => nested.readOnly)) return 'read-only'` for any `text`, read or write,
 * before anything else; `LazyTransaction.refuseBesideIdentity` (lazy-transaction.ts) then
 * refuses the request. The reason the rule exists (a WRITE beside it would fail with 25006)
 * does not hold for a plain read, and unlike a role or a setting, a read-only mode changes
 * nothing a read sees. (The pool seam's `PoolTransaction.refuseBesideIdentity` has the same
 * over-reach.)
 *
 * Expected: the promise "never a false refusal of an ordinary correct program";
 * docs/guides/transactions.md: "a plain read beside it loses nothing and is let through,
 * unless the nested transaction has written"; the refusal's own message gives a write as its
 * reason ("in its read-only mode, where its write is refused").
 *
 * Control: without `@Idempotent()` (201 with the label); keyed, the report not read only (201
 * with the label); keyed, a WRITE beside the read-only report: refused, as documented (500).
 *
 * Fails now: 'Received: status 500, met ["StatementBesideNestedTransactionError"]' (the three
 * controls pass).
 *
 * Severity: medium (a false 500 on every try for a correct program; nothing lost).
 *
 * Suggested fix: in `besideIdentity`, refuse 'read-only' only for a statement that is not a
 * plain read (`!isPlainRead(text)`), the identity and settings rules staying for reads; same
 * in the pool seam.
 *
 * Fixed: only a write is refused beside a nested transaction made READ ONLY
 * (`!isPlainRead(text)` in `NestedIdentity.besideIdentity` and the pool seam's
 * `refuseBesideIdentity`).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body74 = { tag: string; readWrite?: boolean; writeBeside?: boolean };

/** What the label's read met, if it failed. */
const met: string[] = [];

@Injectable()
class Labels {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async of(name: string): Promise<string> {
    try {
      const rows: { label: string }[] = await this.dataSource.query(
        'SELECT label FROM adv74ro_labels WHERE name = $1',
        [name],
      );
      return rows[0]?.label ?? name;
    } catch (error) {
      met.push((error as Error).name);
      throw error;
    }
  }

  async seen(tag: string): Promise<void> {
    await this.dataSource.query('INSERT INTO adv74ro_seen (tag) VALUES ($1)', [tag]);
  }
}

@Injectable()
class Reports {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly labels: Labels,
  ) {}

  async report(body: Body74) {
    return this.dataSource.transaction(async (manager) => {
      if (!body.readWrite) await manager.query('SET TRANSACTION READ ONLY');
      const [{ n }]: { n: string }[] = await manager.query(
        'SELECT count(*) AS n FROM adv74ro_orders',
      );
      const label = await this.labels.of('orders');
      if (body.writeBeside) await this.labels.seen(body.tag);
      return { tag: body.tag, label, n: Number(n) };
    });
  }
}

@Controller()
class ReportsController {
  constructor(private readonly reports: Reports) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return this.reports.report(body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return this.reports.report(body);
  }
}

describe('adversary 74 (review): TypeORM, a plain read beside a READ ONLY nested transaction', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_rev_read_beside_ro', {
      controllers: [ReportsController],
      providers: [Reports, Labels],
      max: 6,
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv74ro_orders (id serial PRIMARY KEY);
          INSERT INTO adv74ro_orders DEFAULT VALUES;
          INSERT INTO adv74ro_orders DEFAULT VALUES;
          CREATE TABLE adv74ro_labels (name text PRIMARY KEY, label text NOT NULL);
          INSERT INTO adv74ro_labels VALUES ('orders', 'Orders');
          CREATE TABLE adv74ro_seen (tag text NOT NULL);`);
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  const summary = (answer: request.Response) => ({
    status: answer.status,
    label: answer.body.label as unknown,
    n: answer.body.n as unknown,
  });

  it('control: without @Idempotent(), the report answers with the label', async () => {
    expect(summary(await post('/plain', undefined, { tag: 'p1' }))).toEqual({
      status: 201,
      label: 'Orders',
      n: 2,
    });
  }, 20_000);

  it('control: keyed, the report not read only: 201 with the label', async () => {
    expect(summary(await post('/keyed', 'k0', { tag: 'k0', readWrite: true }))).toEqual({
      status: 201,
      label: 'Orders',
      n: 2,
    });
  }, 20_000);

  it('control: keyed, a write beside the read-only report: refused as documented', async () => {
    const answer = await post('/keyed', 'k0w', { tag: 'k0w', writeBeside: true });
    expect(answer.status).toBe(500);
  }, 20_000);

  it('keyed, a plain read beside the read-only report: answered, not refused', async () => {
    met.length = 0;
    const answer = await post('/keyed', 'k1', { tag: 'k1' });
    // Received: 500, the read met StatementBesideNestedTransactionError ('read-only').
    expect({ ...summary(answer), met }).toEqual({ status: 201, label: 'Orders', n: 2, met: [] });
  }, 20_000);
});
