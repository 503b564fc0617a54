/**
 * Adversary 80b (orm): an audit subscriber (`afterTransactionCommit`, writing through
 * `event.manager`, the ordinary TypeORM audit trail) of a nested transaction whose commit is put
 * off because another, begun after it through another query runner, is still open; that other
 * transaction then rolls back (its code throws; the handler catches it, as a best-effort step).
 *
 *   @EventSubscriber() class Audit implements EntitySubscriberInterface {
 *     async afterTransactionCommit(e) {
 *       const label = e.queryRunner.data?.label;
 *       if (label) await e.manager.query('INSERT INTO audit (what) VALUES ($1)', [`committed ${label}`]);
 *     }
 *   }
 *   // handler: two units of work at once, the second best-effort
 *   const a = ds.transaction(async (m) => { m.queryRunner.data = { label: 'a' }; insert 'a'; await bStarted; });
 *   const b = afterAInserted.then(() => ds.transaction(async (m) => {
 *     m.queryRunner.data = { label: 'b' }; insert 'b'; startedB(); await a; throw new Error('b refused');
 *   }));
 *   await a; try { await b; } catch { outcome = 'b-refused'; }
 *
 * Why: lib/data-layers/lazy-transaction.ts `commitPutOff` → `putOffSubscribers(from,
 * 'AfterTransactionCommit')`: A's commit is put off (`nested.commitLater`), its subscribers run
 * at once "as TypeORM's commit runs them", and their statements through `event.manager` go
 * on the one connection inside B's savepoint (typeorm_2), which is still open. B's rollback
 * (`rollbackFrom`, `ROLLBACK TO SAVEPOINT typeorm_2`) then takes A's audit row with it, or is
 * refused because the audit ran beside it: either way the audit of a transaction its code was
 * told committed (and whose rows commit) does not survive as it would without the library.
 *
 * The same with the audit written from A's `beforeTransactionCommit` (through `event.manager`,
 * or as a transaction of its own, awaited or started on the side): 500 the same way, where
 * without the library A and its audit are kept (tried in review; the success path, B
 * committing, holds in every form).
 *
 * Docs it contradicts (docs/guides/transactions.md, "One request, one connection"): "The
 * first to commit while the other, begun after it through another query runner, is still open
 * commits at once for its code, as without the library, … and its `beforeTransactionCommit`
 * and `afterTransactionCommit` subscribers run then, as TypeORM's commit runs them … but its
 * savepoint is released only once the other has ended". Nothing says what its subscribers write
 * is the other transaction's and rolls back with it.
 *
 * Severity: medium (a false 500 for correct TypeORM code, on every try: the request rolls back
 * and nothing is stored; nothing wrong is committed). The answer's detail ("A statement of this
 * request's transaction failed and the handler went on") names no failed statement of the
 * handler's either: B's rollback was refused (TypeORM's `transaction()` swallows the refusal
 * and rejects with B's own error, which the handler caught).
 *
 * Fails now: the keyed case with the audit receives `{ status: 500, body: { code:
 * 'transaction_aborted', … }, rows: [] }` where `{ status: 201, body: { tag: 'k1', outcome:
 * 'b-refused' }, rows: ['a', 'committed a'] }` is expected. Controls pass: the plain route
 * (201, `a` and its audit kept), the keyed route with no audit written (201, `a` kept), and the
 * keyed route where B commits too (201, both and both audits).
 *
 * Suggested fix: run a put-off commit's subscribers' statements once its savepoint is
 * released (hold `event.manager`'s statements of `putOffSubscribers` until
 * `releaseCommitted`), or, where they must run now, refuse them at once with a clear error
 * naming the put-off commit (and say so in the guide) rather than let them ride in the other's
 * savepoint.
 *
 * Fixed: a put-off commit's `afterTransactionCommit` is told after the request's COMMIT, as
 * every nested commit's (`LazyTransaction.commitPutOff` notes it in `AfterRequestCommit`,
 * lib/data-layers/after-request-commit.ts): its audit runs through the transaction's runner on
 * a connection of its own then, never inside B's savepoint. (Its `beforeTransactionCommit`
 * still runs at the code's commit: see adversary76-orm-put-off-commit-subscribers-late, skipped.)
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import request from 'supertest';
import {
  DataSource,
  type EntityManager,
  type EntitySubscriberInterface,
  EventSubscriber,
  type TransactionCommitEvent,
} from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

const met = new Map<string, string>();

@EventSubscriber()
class AuditSubscriber implements EntitySubscriberInterface {
  async afterTransactionCommit(event: TransactionCommitEvent) {
    const data = event.queryRunner.data as { label?: string; tag?: string } | undefined;
    if (!data?.label) return;
    await event.manager.query(`INSERT INTO adv80b_pa_rows (tag, what) VALUES ($1, $2)`, [
      data.tag,
      `committed ${data.label}`,
    ]);
  }
}

@Injectable()
class WorkService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run(body: { tag: string; failB: boolean; audit: boolean }) {
    const insert = (manager: EntityManager, what: string) =>
      manager.query(`INSERT INTO adv80b_pa_rows (tag, what) VALUES ($1, $2)`, [body.tag, what]);
    let aInserted!: () => void;
    const afterAInserted = new Promise<void>((resolve) => (aInserted = resolve));
    let startedB!: () => void;
    const bStarted = new Promise<void>((resolve) => (startedB = resolve));
    const a = this.dataSource.transaction(async (manager) => {
      manager.queryRunner!.data = body.audit ? { label: 'a', tag: body.tag } : {};
      await insert(manager, 'a');
      aInserted();
      await bStarted;
    });
    const b = afterAInserted.then(() =>
      this.dataSource.transaction(async (manager) => {
        manager.queryRunner!.data = body.audit ? { label: 'b', tag: body.tag } : {};
        await insert(manager, 'b');
        startedB();
        await a;
        if (body.failB) throw new Error('b refused');
      }),
    );
    let outcome = 'both';
    try {
      await a;
    } catch (error) {
      met.set(`${body.tag}-a`, String(error));
      throw error;
    }
    try {
      await b;
    } catch (error) {
      met.set(`${body.tag}-b`, String(error));
      outcome = 'b-refused';
    }
    return { tag: body.tag, outcome };
  }
}

@Controller()
class WorkController {
  constructor(private readonly service: WorkService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { tag: string; failB: boolean; audit: boolean }) {
    return this.service.run(body);
  }

  @Post('plain')
  plain(@Body() body: { tag: string; failB: boolean; audit: boolean }) {
    return this.service.run(body);
  }
}

describe('adversary 80b: TypeORM, a put-off commit audited from afterTransactionCommit, the later transaction rolled back', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv80b_orm_put_off_audit', {
      controllers: [WorkController],
      providers: [WorkService],
      subscribers: [AuditSubscriber],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv80b_pa_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const outcome = async (
    path: string,
    key: string | undefined,
    tag: string,
    failB: boolean,
    audit = true,
  ) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    const answer = await call.send({ tag, failB, audit });
    const rows = await fixture.admin.query<{ what: string }>(
      'SELECT what FROM adv80b_pa_rows WHERE tag = $1 ORDER BY what',
      [tag],
    );
    return {
      status: answer.status,
      body: answer.body as unknown,
      rows: rows.rows.map((row) => row.what),
      b: met.get(`${tag}-b`) ?? '',
    };
  };

  it('control: without @Idempotent(): A and its audit kept, B rolled back', async () => {
    expect(await outcome('/plain', undefined, 'p1', true)).toEqual({
      status: 201,
      body: { tag: 'p1', outcome: 'b-refused' },
      rows: ['a', 'committed a'],
      b: 'Error: b refused',
    });
  }, 30_000);

  it('control: keyed, B rolled back, no audit subscriber at work: A kept', async () => {
    expect(await outcome('/keyed', 'k-bare', 'k2', true, false)).toEqual({
      status: 201,
      body: { tag: 'k2', outcome: 'b-refused' },
      rows: ['a'],
      b: 'Error: b refused',
    });
  }, 30_000);

  it('control: keyed, B commits too: both and both audits kept', async () => {
    expect(await outcome('/keyed', 'k-both', 'k0', false)).toEqual({
      status: 201,
      body: { tag: 'k0', outcome: 'both' },
      rows: ['a', 'b', 'committed a', 'committed b'],
      b: '',
    });
  }, 30_000);

  it('keyed, B rolled back: A and its audit kept', async () => {
    expect(await outcome('/keyed', 'k-1', 'k1', true)).toEqual({
      status: 201,
      body: { tag: 'k1', outcome: 'b-refused' },
      rows: ['a', 'committed a'],
      b: 'Error: b refused',
    });
  }, 30_000);
});
