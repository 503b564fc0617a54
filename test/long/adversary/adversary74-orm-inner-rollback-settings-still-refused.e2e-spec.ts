/**
 * Adversary 74: on TypeORM, a setting made inside an inner nested transaction that rolls back
 * (the docs' bounded step, `SET LOCAL statement_timeout`, in `manager.transaction()`, whose
 * timeout the code catches to skip an optional step) is gone in PostgreSQL, but the library
 * keeps the enclosing nested transaction marked as having set it: every statement beside it
 * afterwards (the service's `dataSource.query()`, a repository not of its manager) is refused
 * with `StatementBesideNestedTransactionError('settings')`, a 500 for ever on every retry,
 * where without the library (and with the library, when the step does not roll back) it runs.
 *
 *   await dataSource.transaction(async (manager) => {
 *     await manager.query(`INSERT INTO adv74r_rows (tag, what) VALUES ($1, 'order')`, [tag]);
 *     try {
 *       await manager.transaction(async (step) => {          // an optional, bounded step
 *         await step.query(`SET LOCAL statement_timeout = '100ms'`);
 *         await step.query(`INSERT INTO adv74r_rows (tag, what) SELECT $1, 'extra' FROM pg_sleep(0.3)`, [tag]);
 *       });
 *     } catch { }                                              // timed out: skip it
 *     await dataSource.query(`INSERT INTO adv74r_rows (tag, what) VALUES ($1, 'audit')`, [tag]);
 *   });
 *
 * Why: `NestedIdentity.besideIdentity` (lib/data-layers/nested-identity.ts) marks a setting on
 * the OUTERMOST open nested transaction of the view (`this.open.find(… owner === from)`: "a
 * SET LOCAL made in a savepoint lasts until the outermost one ends"). True when the inner one
 * commits; when it rolls back (`ROLLBACK TO SAVEPOINT`), PostgreSQL undoes the setting, but
 * `endedAt` only drops the inner entry and the outer one stays `localSettings: true`. The pool
 * seam fixed exactly this in round 73 (commit 8092a89: "a setting is noted on the innermost
 * savepoint it was set in (rolled back to, it ends: was refused for ever)"); TypeORM's
 * `NestedIdentity` was not. The same holds for `setIdentity` (`SET LOCAL ROLE` in a step
 * rolled back).
 *
 * Expected (docs/guides/transactions.md): a statement beside an open `dataSource.transaction()`
 * "runs inside that nested transaction: kept if it commits"; it is refused only "once that
 * nested transaction has set its role ... or any setting for itself" — here no setting is in
 * force. And "never a false refusal of an ordinary correct program".
 *
 * Control: the same program whose step finishes in time (commits: the setting does last, and
 * refusing is the documented rule) and whose step sets no timeout and fails (no refusal: 201,
 * order and audit kept) pass; without `@Idempotent()` the timed-out program answers 201.
 *
 * Severity: medium (a false 500, stored and replayed for the key: `idempotent-replayed`;
 * nothing lost or duplicated).
 *
 * Fails now: '[{"status":500},{"status":500}] rows []', the audit's `dataSource.query()`
 * rejected with StatementBesideNestedTransactionError ("after that transaction set a setting
 * for itself"); the three controls pass.
 *
 * Fixed: settings and role are noted on the view's innermost nested transaction
 * (`NestedIdentity.besideIdentity`); rolled back, they end with it; released into one of the
 * same code, they pass to it (`endedAt(depth, released)`).
 */
import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body74 = { tag: string; bound?: boolean; sleep: number };

async function work(dataSource: DataSource, body: Body74) {
  const { tag } = body;
  await dataSource.transaction(async (manager) => {
    await manager.query(`INSERT INTO adv74r_rows (tag, what) VALUES ($1, 'order')`, [tag]);
    try {
      await manager.transaction(async (step) => {
        if (body.bound) await step.query(`SET LOCAL statement_timeout = '100ms'`);
        await step.query(
          `INSERT INTO adv74r_rows (tag, what) SELECT $1, 'extra' FROM pg_sleep($2)`,
          [tag, body.sleep],
        );
        if (!body.bound && body.sleep > 0) throw new Error('optional step failed');
      });
    } catch {
      // The optional step timed out (or failed): skipped.
    }
    // The service's own audit, through the DataSource (beside the order's transaction).
    await dataSource.query(`INSERT INTO adv74r_rows (tag, what) VALUES ($1, 'audit')`, [tag]);
  });
  return { tag };
}

@Controller()
class RowsController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return work(this.dataSource, body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return work(this.dataSource, body);
  }
}

describe('adversary 74: TypeORM, a setting rolled back with an inner savepoint still refuses', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_orm_inner_rollback', {
      controllers: [RowsController],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv74r_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv74r_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the step times out and is skipped: 201, order and audit', async () => {
    expect((await post('/plain', undefined, { tag: 'p1', bound: true, sleep: 0.3 })).status).toBe(
      201,
    );
    expect(await kept('p1')).toEqual(['audit', 'order']);
  }, 20_000);

  it('control: keyed, the step fails with no setting and is skipped: 201, order and audit', async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0', sleep: 0.01 })).status).toBe(201);
    expect(await kept('k0')).toEqual(['audit', 'order']);
  }, 20_000);

  it('control: keyed, the bounded step commits (its setting lasts): the documented refusal, nothing kept', async () => {
    const answer = await post('/keyed', 'k1', { tag: 'k1', bound: true, sleep: 0 });
    expect(answer.status).toBe(500);
    expect(await kept('k1')).toEqual([]);
  }, 20_000);

  it('keyed, the bounded step times out and rolls back (its setting gone): 201, order and audit', async () => {
    const tries: { status: number; code: unknown }[] = [];
    for (let attempt = 1; attempt <= 2; attempt += 1) {
      const answer = await post('/keyed', 'k2', { tag: 'k2', bound: true, sleep: 0.3 });
      tries.push({ status: answer.status, code: answer.body.code as unknown });
    }
    const rows = await kept('k2');
    expect(`${JSON.stringify(tries)} rows ${JSON.stringify(rows)}`).toBe(
      `${JSON.stringify([
        { status: 201, code: undefined },
        { status: 201, code: undefined },
      ])} rows ${JSON.stringify(['audit', 'order'])}`,
    );
  }, 20_000);
});
