/**
 * Adversary 74: on TypeORM, a write sent through the pg client a query runner hands out
 * (`await queryRunner.connect()`, the node-postgres client, as `pg-copy-streams` and raw
 * drivers need it) beside an open nested transaction runs inside it and is never marked:
 * the nested transaction rolls back (the error caught), the write with it, and the request
 * answers 201 (stored, replayed) without it. Without the library the runner is a connection
 * of its own and the write commits. The same write through the runner's `query()` is marked
 * and the rollback refused, as documented.
 *
 *   await dataSource.transaction(async (manager) => {
 *     await manager.query(`INSERT … 'hold'`);
 *     await importer.load(tag);     // const runner = dataSource.createQueryRunner();
 *                                   // const client = await runner.connect();   // pg's client
 *                                   // await client.query(`INSERT … 'import'`); runner.release()
 *     throw new Error('payment declined');
 *   }).catch(() => undefined);
 *   return { tag };                                             // 201, no import row
 *
 * Why: the beside rules live in `LazyTransaction`'s `queryFrom` / `streamFrom`
 * (lib/data-layers/lazy-transaction.ts: `refuseBesideIdentity`, `NestedIdentity.markBeside`),
 * which wrap TypeORM's `query()` and `stream()` of each view; the client `connect()` answers
 * (`open`'s guarded client, or `unopened`'s stand-in) goes straight to `send`, which checks
 * only `refusalOf` (transaction control, session settings). So a statement through it is
 * never marked beside, never refused beside a nested transaction's role or settings, and its
 * effects are not noted (`keepSettings`).
 *
 * Expected (docs/guides/transactions.md): "The pg client a runner hands out is given back when
 * the transaction ends" (it is the request's, supported); a statement sent beside an open
 * `dataSource.transaction()` "runs inside that nested transaction: kept if it commits; if it
 * rolls back it would take the statement along, where without the library it commits on its
 * own connection, so that rollback is refused with `StatementBesideNestedTransactionError`".
 * Never "silently lost".
 *
 * Control: without `@Idempotent()`: 201, the import kept; keyed, the import through
 * `runner.query()`: the documented refusal (500, nothing kept).
 *
 * Severity: high (a write the handler was told succeeded is lost under a stored 201).
 *
 * Fails now: 'Received: "201 (replayed), rows []"' (the two controls pass).
 *
 * Fixed: `runner.connect()` called on a view hands out a client whose statements are judged as
 * that view's (`LazyTransaction.clientOf`: refused beside a role, setting or READ ONLY; marking
 * those it runs inside).
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client, type PoolClient } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body74 = { tag: string; throughRunner?: boolean };

@Injectable()
class Importer {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async load(body: Body74) {
    const runner = this.dataSource.createQueryRunner();
    try {
      const text = `INSERT INTO adv74c_rows (tag, what) VALUES ($1, 'import')`;
      if (body.throughRunner) {
        await runner.query(text, [body.tag]);
      } else {
        const client = (await runner.connect()) as PoolClient;
        await client.query(text, [body.tag]);
      }
    } finally {
      await runner.release();
    }
  }
}

@Injectable()
class BookingService {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly importer: Importer,
  ) {}

  async book(body: Body74) {
    await this.dataSource
      .transaction(async (manager) => {
        await manager.query(`INSERT INTO adv74c_rows (tag, what) VALUES ($1, 'hold')`, [body.tag]);
        await this.importer.load(body);
        throw new Error('payment declined');
      })
      .catch(() => undefined);
    return { tag: body.tag };
  }
}

@Controller()
class BookingsController {
  constructor(private readonly bookings: BookingService) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return this.bookings.book(body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return this.bookings.book(body);
  }
}

describe("adversary 74: TypeORM, a write through a runner's pg client beside a nested transaction", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_orm_raw_client', {
      controllers: [BookingsController],
      providers: [BookingService, Importer],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv74c_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv74c_rows WHERE tag = $1 ORDER BY what',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent(), the import commits on its own: 201, the import row', async () => {
    expect((await post('/plain', undefined, { tag: 'p1' })).status).toBe(201);
    expect(await kept('p1')).toEqual(['import']);
  }, 20_000);

  it("control: keyed, the import through the runner's query(): the documented refusal", async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0', throughRunner: true })).status).toBe(500);
    expect(await kept('k0')).toEqual([]);
  }, 20_000);

  it("keyed, the import through the runner's pg client: kept, or refused; never lost under a 201", async () => {
    const answer = await post('/keyed', 'k1', { tag: 'k1' });
    const again = await post('/keyed', 'k1', { tag: 'k1' });
    const rows = await kept('k1');
    const outcome =
      (answer.status === 201 && JSON.stringify(rows) === '["import"]') ||
      (answer.status === 500 && rows.length === 0)
        ? 'kept, or refused'
        : `${answer.status}${again.headers['idempotent-replayed'] ? ' (replayed)' : ''}, ` +
          `rows ${JSON.stringify(rows)}`;
    expect(outcome).toBe('kept, or refused');
  }, 20_000);
});
