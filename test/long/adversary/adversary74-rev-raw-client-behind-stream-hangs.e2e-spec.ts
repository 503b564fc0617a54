/**
 * Adversary 74 (review of 8c68078): on TypeORM, a write through the pg client of ANOTHER query
 * runner (`dataSource.createQueryRunner().connect()`, now "judged as the view" by
 * `LazyTransaction.clientOf`) sent while a `stream()` of the request's code is open is not
 * refused: it queues behind the stream on the request's one connection, the stream's reader
 * awaits it, and the request HANGS with its key held (until the client gives up). Without
 * the library the other runner is a connection of its own and the program finishes (201).
 * The same write through that runner's `query()` is refused at once, as documented
 * (`CursorOpenRefusedError`, 500 `cursor_open`).
 *
 *   await dataSource.transaction(async (manager) => {
 *     const rows = await manager.queryRunner!.stream('SELECT g FROM generate_series(1, 1000) g');
 *     const runner = dataSource.createQueryRunner();              // an importer's own
 *     const client = (await runner.connect()) as PoolClient;
 *     for await (const row of rows) await client.query('INSERT … VALUES ($1)', [row.g]);
 *     await runner.release();
 *   });
 *
 * Why: lib/data-layers/lazy-transaction.ts, `clientOf`'s `judged` runs
 * `refuseBesideIdentity` and `nested.markBeside` only; `queryFrom` (a view's `query()`) and
 * `streamFrom` also run `refuseBehindStream()` (and `refuseBesidePhase()`), which the client's
 * statements skip. The statement goes to `open`'s guarded client and `send`, which queues it
 * behind the QueryStream (pg runs one query at a time): the stream's cursor is never read
 * further, the INSERT never runs.
 *
 * Expected (docs/guides/transactions.md): "A statement (or a second stream) sent while a
 * `stream()` of a query builder or query runner is open (a write per streamed row) would
 * wait for the stream, and the stream's reader for it: refused at once with
 * `CursorOpenRefusedError`, 500 `cursor_open`"; the promise: "never a hang".
 *
 * Control: without `@Idempotent()` (201, 1000 rows); keyed, the write through the other
 * runner's `query()`: refused at once (500).
 *
 * Fails now: the keyed request gets no answer within 8 s ('timeout'; probed with 40 s: still
 * none; without the library it answers in well under a second). The two controls pass.
 *
 * Severity: high (a hang holding the key, the connection and a pool slot; every retry meets
 * the key in progress).
 *
 * Suggested fix: in `clientOf`'s `judged`, `this.refuseBehindStream()` (and
 * `refuseBesidePhase()`) first, answered in the form the statement was sent in
 * (`refusedStatement`).
 *
 * Fixed: the client `clientOf` hands out refuses behind an open stream and beside a phase first
 * (`refuseBehindStream`, `refuseBesidePhase`), answered in the form the statement was sent in
 * (`refusedStatement`).
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
class Copier {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async copy(body: Body74) {
    await this.dataSource.transaction(async (manager) => {
      const rows = (await manager.queryRunner!.stream(
        'SELECT g FROM generate_series(1, 1000) g',
      )) as unknown as AsyncIterable<{ g: number }>;
      const runner = this.dataSource.createQueryRunner();
      try {
        const text = 'INSERT INTO adv74h_rows (tag, n) VALUES ($1, $2)';
        if (body.throughRunner) {
          for await (const row of rows) await runner.query(text, [body.tag, row.g]);
        } else {
          const client = (await runner.connect()) as PoolClient;
          for await (const row of rows) await client.query(text, [body.tag, row.g]);
        }
      } finally {
        await runner.release();
      }
    });
    return { tag: body.tag };
  }
}

@Controller()
class CopyController {
  constructor(private readonly copier: Copier) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body74) {
    return this.copier.copy(body);
  }

  @Post('plain')
  plain(@Body() body: Body74) {
    return this.copier.copy(body);
  }
}

describe("adversary 74 (review): TypeORM, another runner's pg client behind an open stream", () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv74_rev_raw_stream', {
      controllers: [CopyController],
      providers: [Copier],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv74h_rows (id serial PRIMARY KEY, tag text NOT NULL, n int NOT NULL)',
        );
      },
    });
    ({ admin, app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const count = async (tag: string) =>
    Number(
      (
        await admin.query<{ n: string }>('SELECT count(*) AS n FROM adv74h_rows WHERE tag = $1', [
          tag,
        ])
      ).rows[0].n,
    );

  /**
   * The answer's status, or 'timeout' when none came within 20 s (a hang; the copy takes under
   * a second on a quiet machine, and the plain control took more than 8 s under a load of 10).
   */
  const post = async (path: string, key: string | undefined, body: Body74) => {
    const call = request(app.getHttpServer()).post(path).timeout(20_000);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body).then(
      (answer) => answer.status,
      (error: { timeout?: number }) => (error.timeout ? 'timeout' : String(error)),
    );
  };

  it('control: without @Idempotent(), the copy finishes: 201, 1000 rows', async () => {
    expect(await post('/plain', undefined, { tag: 'p1' })).toBe(201);
    expect(await count('p1')).toBe(1000);
  }, 45_000);

  it("control: keyed, through the other runner's query(): refused at once", async () => {
    expect(await post('/keyed', 'k0', { tag: 'k0', throughRunner: true })).toBe(500);
    expect(await count('k0')).toBe(0);
  }, 45_000);

  it("keyed, through the other runner's pg client: refused (or done), never a hang", async () => {
    const status = await post('/keyed', 'k1', { tag: 'k1' });
    expect(status === 201 || status === 500 ? 'answered' : status).toBe('answered');
  }, 45_000);
});
