/**
 * Adversary 75: on TypeORM, a nested transaction made read only through the node-postgres
 * client its query runner hands out (`await runner.connect()`, then `client.query('SET
 * TRANSACTION READ ONLY')`, as a report helper that takes a `pg` client does), in a database
 * with a deferrable constraint: its COMMIT runs the deferred checks inside the read-only
 * savepoint, and fails with 25006 "cannot execute SELECT FOR KEY SHARE in a read-only
 * transaction". The request answers 500, stored and replayed to every retry; nothing is
 * committed. Without the library the report's transaction runs on a connection of its own,
 * and the handler's earlier insert commits with its foreign key checked: 201.
 *
 *   await dataSource.query('INSERT INTO adv75d_child (tag, parent_id) VALUES ($1, 1)', [tag]);
 *   await dataSource.transaction(async (manager) => {        // the report's
 *     const client = await manager.queryRunner!.connect();    // a node-postgres client
 *     await client.query('SET TRANSACTION READ ONLY');
 *     await manager.query('SELECT count(*) FROM adv75d_child');
 *   });
 *
 * Why: `LazyTransaction.commitFrom` (lib/data-layers/lazy-transaction.ts) skips the deferred
 * check at the outermost nested commit only when `this.readOnlyFrom === 2`, and `readOnlyFrom`
 * is set only in `queryFrom` (a statement through the view's `query()`). A statement through
 * `clientOf`'s judged client goes through `NestedIdentity.besideIdentity`, which marks the
 * nested transaction `readOnly`, but never sets `readOnlyFrom`: `beforeRelease` then sends
 * `deferredCheck()` (`SET CONSTRAINTS ALL IMMEDIATE`, the foreign key's check of the
 * handler's insert made before the report) inside the read-only savepoint.
 *
 * The same root, with no deferrable constraint needed: on a route above READ COMMITTED (the
 * heartbeat's renewals then run inside the request's transaction), a slow report made read
 * only through the client meets a renewal inside its read-only savepoint: `LeaseRenewals`'
 * `renew` (lib/claim/lease-renewals.ts) asks `holder.readOnlyNow`, which
 * `LazyTransaction.readOnlyNow` answers from the same `readOnlyFrom`: false, so it sends the
 * lease's UPDATE there, refused (25006), the request's transaction aborted; the handler's next
 * statement fails with 25P02 "current transaction is aborted", and the request answers 500.
 * Through `manager.query()` the same tick sends `SELECT 1` instead, and the route answers 201.
 *
 * Expected (docs/guides/transactions.md): "A read-only nested transaction runs none of it
 * (what was deferred before it, a foreign key's check, could not run there: the request's
 * COMMIT runs it)"; round 74 made the runner's client "judged as one through the view's
 * `query()`" ("So is a statement sent through the node-postgres client a query runner hands
 * out (`await runner.connect()`)"). The same program sending the mode through
 * `manager.query()` answers 201.
 *
 * Control: without `@Idempotent()` (201, the row), and the same keyed programs sending `SET
 * TRANSACTION READ ONLY` through `manager.query()` (201, the row; at REPEATABLE READ too).
 *
 * Severity: medium (a false refusal of correct code, its 500 stored and replayed: the key's
 * work never done; a `DEFERRABLE` constraint in the database, or a route above READ
 * COMMITTED with a report slower than a heartbeat tick).
 *
 * Fails now: expect(received).toEqual(expected): Expected {"rows": ["k1"], "status": 201},
 * Received {"rows": [], "status": 500} (the handler met `QueryFailedError: cannot execute
 * SELECT FOR KEY SHARE in a read-only transaction`); at REPEATABLE READ: Expected
 * {"rows": ["r1"], "status": 201}, Received {"rows": [], "status": 500} (the handler met 25P02).
 * The three controls pass.
 *
 * Suggested fix: set `readOnlyFrom` where the mode is judged for every path (in `clientOf`'s
 * `judged` as in `queryFrom`), or read it from `NestedIdentity` (the innermost's `readOnly`)
 * at the commit.
 *
 * Fixed: one judgement for every path (`LazyTransaction.judge`, lib/data-layers/
 * lazy-transaction.ts): `queryFrom`, `streamFrom` and `clientOf`'s `judged` all go through it,
 * and it sets `readOnlyFrom` for a nested transaction made read only, whichever way the mode
 * came: the nested COMMIT then runs no deferred check, and `readOnlyNow` keeps a renewal out.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body75 = { tag: string; via: 'client' | 'manager' };

interface PgClient {
  query(text: string): Promise<unknown>;
}

@Injectable()
class ReportService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async run(body: Body75) {
    await this.dataSource.query('INSERT INTO adv75d_child (tag, parent_id) VALUES ($1, 1)', [
      body.tag,
    ]);
    await this.dataSource.transaction(async (manager) => {
      if (body.via === 'client') {
        const client = (await manager.queryRunner!.connect()) as PgClient;
        await client.query('SET TRANSACTION READ ONLY');
      } else {
        await manager.query('SET TRANSACTION READ ONLY');
      }
      await manager.query('SELECT count(*) FROM adv75d_child');
    });
    return { tag: body.tag };
  }

  /** A slow read-only report (longer than a heartbeat tick), then the handler's write. */
  async slowReport(body: Body75) {
    await this.dataSource.transaction(async (manager) => {
      if (body.via === 'client') {
        const client = (await manager.queryRunner!.connect()) as PgClient;
        await client.query('SET TRANSACTION READ ONLY');
      } else {
        await manager.query('SET TRANSACTION READ ONLY');
      }
      await manager.query('SELECT count(*) FROM adv75d_child, pg_sleep(0.5)');
    });
    await this.dataSource.query('INSERT INTO adv75d_child (tag, parent_id) VALUES ($1, 1)', [
      body.tag,
    ]);
    return { tag: body.tag };
  }
}

@Controller()
class ReportController {
  constructor(private readonly reports: ReportService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body75) {
    return this.reports.run(body);
  }

  // Above READ COMMITTED the renewals run inside the transaction; a tick every 100 ms.
  @Post('keyed-rr')
  @Idempotent({ isolationLevel: 'REPEATABLE READ', leaseMs: 300 })
  keyedRepeatable(@Body() body: Body75) {
    return this.reports.slowReport(body);
  }

  @Post('plain')
  plain(@Body() body: Body75) {
    return this.reports.run(body);
  }
}

describe('adversary 75: TypeORM, READ ONLY through the runner client, then the deferred check', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75_orm_client_read_only', {
      controllers: [ReportController],
      providers: [ReportService],
      max: 6,
      // Before the app starts: its start-up catalog sees the deferrable constraint.
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75d_parent (id int PRIMARY KEY); INSERT INTO adv75d_parent VALUES (1)',
        );
        await admin.query(
          `CREATE TABLE adv75d_child (id serial PRIMARY KEY, tag text NOT NULL,
             parent_id int NOT NULL REFERENCES adv75d_parent (id) DEFERRABLE INITIALLY DEFERRED)`,
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
      await admin.query<{ tag: string }>('SELECT tag FROM adv75d_child WHERE tag = $1', [tag])
    ).rows.map((row) => row.tag);

  const post = (path: string, key: string | undefined, body: Body75) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it("control: without @Idempotent(), READ ONLY through the runner's client: 201, the row", async () => {
    expect((await post('/plain', undefined, { tag: 'p1', via: 'client' })).status).toBe(201);
    expect(await kept('p1')).toEqual(['p1']);
  }, 20_000);

  it('control: keyed, READ ONLY through manager.query(): 201, the row', async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0', via: 'manager' })).status).toBe(201);
    expect(await kept('k0')).toEqual(['k0']);
  }, 20_000);

  it("keyed, READ ONLY through the runner's client: 201, the row", async () => {
    const answer = await post('/keyed', 'k1', { tag: 'k1', via: 'client' });
    expect({ status: answer.status, rows: await kept('k1') }).toEqual({
      status: 201,
      rows: ['k1'],
    });
  }, 20_000);

  it('control: keyed at REPEATABLE READ, a slow report made READ ONLY through manager.query(): 201', async () => {
    const answer = await post('/keyed-rr', 'r0', { tag: 'r0', via: 'manager' });
    expect({ status: answer.status, rows: await kept('r0') }).toEqual({
      status: 201,
      rows: ['r0'],
    });
  }, 20_000);

  it("keyed at REPEATABLE READ, a slow report made READ ONLY through the runner's client: 201", async () => {
    const answer = await post('/keyed-rr', 'r1', { tag: 'r1', via: 'client' });
    expect({ status: answer.status, rows: await kept('r1') }).toEqual({
      status: 201,
      rows: ['r1'],
    });
  }, 20_000);
});
