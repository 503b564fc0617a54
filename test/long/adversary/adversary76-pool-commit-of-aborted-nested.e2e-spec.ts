/**
 * Adversary 76: node-postgres code whose nested transaction met a failure it caught, and that
 * then sends `COMMIT`, answers 500 with nothing kept in an `@Idempotent()` handler. PostgreSQL
 * answers a `COMMIT` of an aborted transaction with `ROLLBACK`, not an error: node-postgres
 * resolves it (`command: 'ROLLBACK'`), the transaction's work is gone, and the code goes on.
 * Without the library: 201, `command: 'ROLLBACK'`, the write after it committed.
 *
 *   const client = await pool.connect();
 *   try {
 *     await client.query('BEGIN');
 *     await client.query(`INSERT INTO notes (tag, what) VALUES ($1, 'first')`, [tag]);
 *     await client.query(`INSERT INTO notes (id, tag, what) VALUES (1, $1, 'dup')`, [tag]).catch(log); // 23505
 *     ({ command } = await client.query('COMMIT'));          // 'ROLLBACK', no error
 *   } finally {
 *     client.release();
 *   }
 *   await pool.query(`INSERT INTO notes (tag, what) VALUES ($1, 'after')`, [tag]);
 *   return { tag, command };
 *
 * Why: the view's `COMMIT` is `PoolTransaction.endSavepoint(…, 'commit')`: a `RELEASE SAVEPOINT`
 * (with the nested state put back) sent into the aborted transaction, which PostgreSQL refuses
 * with 25P02 ("current transaction is aborted"); the `COMMIT` rejects with it, where without
 * the library it resolves as `ROLLBACK`. The code's `finally` releases the view (which rolls
 * the savepoint back), but the handler has thrown: 500, and the write it makes after a nested
 * transaction that PostgreSQL rolled back is never made. The library's own comment expects a
 * data layer to send `ROLLBACK` after such a failed `COMMIT`; node-postgres code that relies on
 * PostgreSQL's answer does not.
 *
 * Expected (docs/guides/data-layers.md): "A failed statement that the handler catches and goes
 * on from aborts the transaction … Inside a nested transaction that rolls back, it is only that
 * savepoint's." In PostgreSQL, the `COMMIT` of an aborted transaction is its rollback; and
 * `COMMIT` on a view "releases" the savepoint that stands for the code's transaction, whose
 * answer the code reads as PostgreSQL's.
 *
 * Control: without `@Idempotent()`: 201 `{ command: 'ROLLBACK' }`, rows ['after'].
 *
 * Severity: medium (a false 500 on every try; the request's other work lost; nothing
 * committed twice).
 *
 * Fails now: keyed: 500 ("Internal server error": the COMMIT rejected with 25P02), rows [].
 *
 * Suggested fix: in `endSavepoint`, when the nested transaction is known aborted (a failure
 * inside it since its savepoint, `lastError`, or the `RELEASE` answered 25P02), end it as
 * PostgreSQL ends an aborted transaction's `COMMIT`: `ROLLBACK TO SAVEPOINT …; RELEASE …`, and
 * resolve with `command: 'ROLLBACK'`.
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

type Body76 = { tag: string };

async function work(pool: Pool, { tag }: Body76) {
  const client = await pool.connect();
  let command: string | undefined;
  try {
    await client.query('BEGIN');
    await client.query(`INSERT INTO adv76pca_notes (tag, what) VALUES ($1, 'first')`, [tag]);
    await client
      .query(`INSERT INTO adv76pca_notes (id, tag, what) VALUES (1, $1, 'dup')`, [tag])
      .catch(() => undefined);
    command = (await client.query('COMMIT')).command;
  } finally {
    client.release();
  }
  await pool.query(`INSERT INTO adv76pca_notes (tag, what) VALUES ($1, 'after')`, [tag]);
  return { tag, command };
}

@Controller()
class NotesController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body76) {
    return work(this.pool, body);
  }

  @Post('plain')
  plain(@Body() body: Body76) {
    return work(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class NotesModule {}

describe('adversary 76: COMMIT of a nested transaction a caught failure aborted', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_commit_aborted', {
      module: NotesModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE adv76pca_notes (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL);
          INSERT INTO adv76pca_notes (id, tag, what) VALUES (1, 'seed', 'seed');
          SELECT setval('adv76pca_notes_id_seq', 100);`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const rows = async (tag: string) =>
    (
      await fixture.admin.query<{ what: string }>(
        'SELECT what FROM adv76pca_notes WHERE tag = $1 ORDER BY id',
        [tag],
      )
    ).rows.map((row) => row.what);

  const post = (path: string, key: string | undefined, body: Body76) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  it('control: without @Idempotent()', async () => {
    const tag = 'plain';
    const answer = await post('/plain', undefined, { tag });
    expect({ status: answer.status, body: answer.body as unknown, rows: await rows(tag) }).toEqual({
      status: 201,
      body: { tag, command: 'ROLLBACK' },
      rows: ['after'],
    });
  }, 30_000);

  it('keyed', async () => {
    const tag = 'keyed';
    const answer = await post('/keyed', tag, { tag });
    expect({ status: answer.status, body: answer.body as unknown, rows: await rows(tag) }).toEqual({
      status: 201,
      body: { tag, command: 'ROLLBACK' },
      rows: ['after'],
    });
  }, 30_000);
});
