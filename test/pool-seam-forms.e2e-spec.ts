import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import pg, { type Pool, type PoolClient, type QueryResult } from 'pg';
import request from 'supertest';
import { Idempotent, IdempotencyModule } from '../lib/index.js';
import { ADAPTERS, bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { createTestPool, endTestPool } from './support/test-pool.js';

/**
 * The pool seam's other ways in: node-postgres' callback forms (`pool.query(text, values,
 * callback)`, `pool.connect(callback)`, a view's `client.query(..., callback)`), a
 * submittable (`new pg.Query()`, as a cursor is) as the request's first statement, and
 * statements sent in parallel. Each must land in the request's transaction: committed once
 * with the answer, and rolled back with it when the handler fails after writing (the cells'
 * `fail: true`), which a write that ran outside the transaction would survive.
 */
let pool: Pool;

interface LedgerBody {
  tag: string;
  fail?: boolean;
}

const INSERT = 'INSERT INTO ledger (tag, note) VALUES ($1, $2)';

function failIfAsked(body: LedgerBody): void {
  if (body.fail) throw new Error('the handler failed after its writes');
}

@Controller()
class FormsController {
  @Post('pool-query-callback')
  @Idempotent()
  async poolQueryCallback(@Body() body: LedgerBody) {
    await new Promise<void>((resolve, reject) => {
      void pool.query(INSERT, [body.tag, 'callback'], (error: Error | undefined) =>
        error ? reject(error) : resolve(),
      );
    });
    failIfAsked(body);
    return { tag: body.tag };
  }

  @Post('pool-connect-callback')
  @Idempotent()
  async poolConnectCallback(@Body() body: LedgerBody) {
    await new Promise<void>((resolve, reject) => {
      pool.connect((error, client, done) => {
        if (error || !client) return reject(error ?? new Error('no client'));
        // The view's own callback form, inside a nested transaction of the view.
        client.query('BEGIN', (begun: Error | undefined) => {
          if (begun) return reject(begun);
          client.query(INSERT, [body.tag, 'view'], (inserted: Error | undefined) => {
            if (inserted) return reject(inserted);
            client.query('COMMIT', (committed: Error | undefined) => {
              done();
              return committed ? reject(committed) : resolve();
            });
          });
        });
      });
    });
    failIfAsked(body);
    return { tag: body.tag };
  }

  /** A submittable as the first statement: it must wait for the request's BEGIN. */
  @Post('submittable-first')
  @Idempotent()
  async submittableFirst(@Body() body: LedgerBody) {
    const client: PoolClient = await pool.connect();
    try {
      const rows: unknown[] = [];
      await new Promise<void>((resolve, reject) => {
        const query = client.query(
          new pg.Query(`${INSERT} RETURNING id`, [body.tag, 'submittable']),
        );
        query.on('row', (row: unknown) => rows.push(row));
        query.on('end', () => resolve());
        query.on('error', reject);
      });
      failIfAsked(body);
      return { rows: rows.length };
    } finally {
      client.release();
    }
  }

  /**
   * Two connections of the pool, each with a nested transaction: ended in the order they
   * began (`inOrder`), both are kept; ended out of it, the first's COMMIT would end the second's
   * savepoint too, so it is refused, the handler's catch notwithstanding, and the request can
   * only roll back.
   */
  @Post('interleaved')
  @Idempotent()
  async interleaved(@Body() body: LedgerBody & { inOrder: boolean }) {
    const first = await pool.connect();
    const second = await pool.connect();
    try {
      await first.query('BEGIN');
      await first.query(INSERT, [body.tag, 'first']);
      await second.query('BEGIN');
      await second.query(INSERT, [body.tag, 'second']);
      if (body.inOrder) {
        await second.query('COMMIT');
        await first.query('COMMIT');
      } else {
        await first.query('COMMIT').catch(() => undefined);
        await second.query('COMMIT');
      }
      return { tag: body.tag };
    } finally {
      first.release();
      second.release();
    }
  }

  /** A connection given back with its nested transaction open: that transaction rolls back. */
  @Post('released-open')
  @Idempotent()
  async releasedOpen(@Body() body: LedgerBody) {
    const client = await pool.connect();
    await client.query('BEGIN');
    await client.query(INSERT, [body.tag, 'inner']);
    client.release();
    await pool.query(INSERT, [body.tag, 'outer']);
    return { tag: body.tag };
  }

  /**
   * A nested transaction that rolls back, and a statement sent outside it while it is open
   * (through the pool, as `db` instead of `trx` inside a transaction's callback, or from work
   * running beside it). On one connection that statement would land inside the savepoint and
   * roll back with it, while without the library it commits on its own connection.
   */
  @Post('beside-nested')
  @Idempotent()
  async besideNested(@Body() body: LedgerBody & { view?: boolean; commit?: boolean }) {
    const nested = await pool.connect();
    try {
      await nested.query('BEGIN');
      await nested.query(INSERT, [body.tag, 'nested']);
      if (body.view) {
        const other = await pool.connect();
        try {
          await other.query(INSERT, [body.tag, 'beside']);
        } finally {
          other.release();
        }
      } else {
        await pool.query(INSERT, [body.tag, 'beside']);
      }
      await nested.query(body.commit ? 'COMMIT' : 'ROLLBACK');
    } finally {
      nested.release();
    }
    return { tag: body.tag };
  }

  /** A named (prepared) statement first, as Drizzle's `.prepare()` and pg users send it. */
  @Post('named-first')
  @Idempotent()
  async namedFirst(@Body() body: LedgerBody) {
    await pool.query({ name: 'forms_insert', text: INSERT, values: [body.tag, 'named'] });
    await pool.query({ name: 'forms_insert', text: INSERT, values: [body.tag, 'named-again'] });
    failIfAsked(body);
    return { tag: body.tag };
  }

  @Post('parallel')
  @Idempotent()
  async parallel(@Body() body: LedgerBody) {
    const written: QueryResult[] = await Promise.all(
      ['a', 'b', 'c', 'd'].map((note) => pool.query(INSERT, [body.tag, note])),
    );
    failIfAsked(body);
    return { statements: written.length };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [FormsController],
})
class FormsAppModule {}

describe.each(ADAPTERS)('the pool seam’s other call forms (%s)', (adapter) => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase(`pool_forms_${adapter}`);
    pool = createTestPool({ connectionString: database.url, max: 4 });
    await pool.query(readFileSync('migrations/schema.sql', 'utf8'));
    await pool.query(
      'CREATE TABLE ledger (id serial PRIMARY KEY, tag text NOT NULL, note text NOT NULL)',
    );
    app = await bootstrapTestApp(FormsAppModule, adapter);
  });
  afterAll(async () => {
    await app?.close();
    // Every connection closed before the forced drop (see endTestPool).
    await endTestPool(pool);
    await database?.drop();
  });

  const notes = async (tag: string) =>
    (
      await pool.query<{ note: string }>('SELECT note FROM ledger WHERE tag = $1 ORDER BY note', [
        tag,
      ])
    ).rows.map((row) => row.note);
  const post = (path: string, key: string, body: LedgerBody) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const stored = async (key: string) =>
    (
      await pool.query<{ state: string; response_code: number | null }>(
        'SELECT state, response_code FROM idempotency_keys WHERE key = $1',
        [key],
      )
    ).rows;

  it.each<[string, string, string[]]>([
    ['pool.query with a callback', '/pool-query-callback', ['callback']],
    ['pool.connect with a callback, and the view’s callbacks', '/pool-connect-callback', ['view']],
    ['a submittable as the first statement', '/submittable-first', ['submittable']],
    ['four statements sent in parallel', '/parallel', ['a', 'b', 'c', 'd']],
    ['a named statement, first and again', '/named-first', ['named', 'named-again']],
  ])('%s: committed once with the answer, and replayed', async (_name, path, expected) => {
    const key = `ok-${adapter}-${path}`;
    const first = await post(path, key, { tag: key });
    expect(first.status).toBe(201);
    expect(await notes(key)).toEqual(expected);
    expect(await stored(key)).toEqual([{ state: 'done', response_code: 201 }]);
    const again = await post(path, key, { tag: key });
    expect(again.status).toBe(201);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.text).toBe(first.text);
    expect(await notes(key)).toEqual(expected);
  });

  it('keeps two nested transactions ended in the order they began', async () => {
    const key = `in-order-${adapter}`;
    const answer = await post('/interleaved', key, { tag: key, inOrder: true } as LedgerBody);
    expect(answer.status).toBe(201);
    expect(await notes(key)).toEqual(['first', 'second']);
  });

  it('refuses a nested COMMIT while a transaction begun after it is open, even caught: 500, nothing kept', async () => {
    const key = `out-of-order-${adapter}`;
    const answer = await post('/interleaved', key, { tag: key, inOrder: false } as LedgerBody);
    expect(answer.status).toBe(500);
    expect(await notes(key)).toEqual([]);
    const again = await post('/interleaved', key, { tag: key, inOrder: false } as LedgerBody);
    expect(again.text).toBe(answer.text);
    expect(await notes(key)).toEqual([]);
  });

  it('rolls back a nested transaction whose connection is given back open, and keeps the rest', async () => {
    const key = `released-open-${adapter}`;
    const answer = await post('/released-open', key, { tag: key });
    expect(answer.status).toBe(201);
    expect(await notes(key)).toEqual(['outer']);
  });

  it.each([
    ['through the pool', false],
    ['on another connection of the pool', true],
  ])(
    'refuses the rollback of a nested transaction holding a statement sent %s beside it (it took that along): 500, nothing kept',
    async (_name, view) => {
      const key = `beside-${adapter}-${String(view)}`;
      const answer = await post('/beside-nested', key, { tag: key, view } as LedgerBody);
      expect(answer.status).toBe(500);
      expect(await notes(key)).toEqual([]);
    },
  );

  it('runs a named statement first on every request, whichever connection it lands on', async () => {
    const answers = await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        post('/named-first', `named-many-${adapter}-${i}`, { tag: `named-many-${adapter}-${i}` }),
      ),
    );
    for (const answer of answers) expect(answer.status).toBe(201);
    for (let i = 0; i < 12; i++) {
      expect(await notes(`named-many-${adapter}-${i}`)).toEqual(['named', 'named-again']);
    }
  });

  it('keeps a statement sent beside a nested transaction that commits, with it', async () => {
    const key = `beside-commit-${adapter}`;
    const answer = await post('/beside-nested', key, { tag: key, commit: true } as LedgerBody);
    expect(answer.status).toBe(201);
    expect(await notes(key)).toEqual(['beside', 'nested']);
  });

  it.each([
    ['pool.query with a callback', '/pool-query-callback'],
    ['pool.connect with a callback, and the view’s callbacks', '/pool-connect-callback'],
    ['a submittable as the first statement', '/submittable-first'],
    ['four statements sent in parallel', '/parallel'],
    ['a named statement, first and again', '/named-first'],
  ])('%s: rolled back with the request when the handler fails after it', async (_name, path) => {
    const key = `fail-${adapter}-${path}`;
    const answer = await post(path, key, { tag: key, fail: true });
    expect(answer.status).toBe(500);
    // Nothing the handler wrote survives its failure: each write was in the transaction.
    expect(await notes(key)).toEqual([]);
  });
});
