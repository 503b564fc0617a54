/**
 * Adversary 75: on TypeORM, `SET TRANSACTION READ ONLY` sent alone through the node-postgres
 * client a query runner hands out (`await runner.connect()`), outside any transaction of the
 * handler's (a report helper that takes a `pg` client and marks its work read only, used
 * inside and outside transactions), makes the request's own transaction read only: the
 * handler's next write fails with 25006 "cannot execute INSERT in a read-only transaction",
 * and its 500 is stored and replayed. Without the library the statement runs on the runner's
 * connection outside any transaction, where it does nothing (a warning): 201, the rows.
 *
 *   const runner = dataSource.createQueryRunner();
 *   const client = await runner.connect();                 // a node-postgres client
 *   await client.query('SET TRANSACTION READ ONLY');        // no transaction open: a no-op
 *   await dataSource.query('INSERT INTO adv75m_rows …');    // 25006 with the library
 *   await runner.release();
 *
 * Why: `LazyTransaction.queryFrom` (lib/data-layers/lazy-transaction.ts) sends such a statement
 * alone (`isTransactionModeOnly` at depth 1: `readAlone`), or refuses it among others
 * (`setsReadOnly`: `ReadOnlyTransactionRefusedError`). The client `connect()` answers goes
 * around both: before the first statement, `unopened`'s `query` opens the request's
 * connection and sends it there (it is not a plain read); after it, `clientOf`'s `judged`
 * checks the phase, a stream and the nested identity, then `send`s it as it is, into the
 * request's transaction (`RequestTransaction.send` checks `refusalOf`, which has no rule for
 * the mode). Both with the request's transaction begun before it and as its first statement.
 *
 * Expected (docs/guides/transactions.md, the table of outcomes): "the handler makes the
 * transaction read only, outside any transaction of its own: `SET TRANSACTION READ ONLY` ...
 * each alone in its text | what the handler answers | its effects and the stored answer: the
 * statement was sent apart, on a connection of its own, where it does nothing, as without the
 * library"; and round 74: the runner's client is "judged as one through the view's `query()`".
 *
 * Control: without `@Idempotent()` (201, the rows), and the same keyed handler sending the
 * statement through `runner.query()` (201, the rows: sent apart).
 *
 * Severity: medium (a false 500 stored and replayed for a statement the docs say runs apart
 * and does nothing; the key's work never done).
 *
 * Fails now: expect(received).toEqual(expected): Expected {"retry": "201 replayed true",
 * "rows": [...], "status": 201}, Received {"retry": "500 replayed true", "rows": [],
 * "status": 500} for `client` (the request begun before it) and
 * `client-first` (its first statement); the handler met `QueryFailedError: cannot execute
 * INSERT in a read-only transaction`. The two controls pass.
 *
 * Suggested fix: give `clientOf`'s `judged` and `unopened`'s `query` the same depth-1 rules as
 * `queryFrom` (a transaction mode alone sent apart; among others refused), e.g. by routing
 * them through one shared check before `send`.
 *
 * Fixed: one judgement for every path (`LazyTransaction.judge`, lib/data-layers/
 * lazy-transaction.ts), which `clientOf`'s `judged` now uses as `queryFrom` does: a
 * transaction's mode alone outside any nested transaction is `alone`, and the client sends it
 * apart (`RequestTransaction.sendAlone`, answered as the client was called: promise or
 * callback); among other statements it is refused (`ReadOnlyTransactionRefusedError`). The
 * client `connect()` answers before the first statement is wrapped by `clientOf` too.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

type Body75 = { tag: string; via: 'client' | 'client-first' | 'runner' };

interface PgClient {
  query(text: string): Promise<unknown>;
}

@Injectable()
class ReportService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private insert(tag: string, what: string) {
    return this.dataSource.query('INSERT INTO adv75m_rows (tag, what) VALUES ($1, $2)', [
      tag,
      what,
    ]);
  }

  async run(body: Body75) {
    const runner = this.dataSource.createQueryRunner();
    try {
      const client = (await runner.connect()) as PgClient;
      if (body.via !== 'client-first') await this.insert(body.tag, 'before');
      if (body.via === 'runner') await runner.query('SET TRANSACTION READ ONLY');
      else await client.query('SET TRANSACTION READ ONLY');
      await this.insert(body.tag, 'after');
    } finally {
      await runner.release();
    }
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

  @Post('plain')
  plain(@Body() body: Body75) {
    return this.reports.run(body);
  }
}

describe("adversary 75: TypeORM, SET TRANSACTION READ ONLY alone through the runner's client", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv75_orm_client_mode', {
      controllers: [ReportController],
      providers: [ReportService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv75m_rows (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL)',
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
        'SELECT what FROM adv75m_rows WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body75) => {
    const call = request(app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it("control: without @Idempotent(), through the runner's client: 201, the rows", async () => {
    expect((await post('/plain', undefined, { tag: 'p1', via: 'client' })).status).toBe(201);
    expect(await kept('p1')).toEqual(['before', 'after']);
    expect((await post('/plain', undefined, { tag: 'p2', via: 'client-first' })).status).toBe(201);
    expect(await kept('p2')).toEqual(['after']);
  }, 20_000);

  it('control: keyed, through runner.query(): sent apart, 201, the rows', async () => {
    expect((await post('/keyed', 'k0', { tag: 'k0', via: 'runner' })).status).toBe(201);
    expect(await kept('k0')).toEqual(['before', 'after']);
  }, 20_000);

  for (const [via, rows] of [
    ['client', ['before', 'after']],
    ['client-first', ['after']],
  ] as const) {
    it(`keyed, through the runner's client (${via}): sent apart, 201, the rows, replayed`, async () => {
      const key = `k-${via}`;
      const answer = await post('/keyed', key, { tag: key, via });
      const retry = await post('/keyed', key, { tag: key, via });
      expect({
        status: answer.status,
        rows: await kept(key),
        retry: `${retry.status} replayed ${String(retry.headers['idempotent-replayed'])}`,
      }).toEqual({ status: 201, rows, retry: '201 replayed true' });
    }, 20_000);
  }
});
