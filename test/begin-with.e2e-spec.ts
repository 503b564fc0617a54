import pg from 'pg';
import { DataSource } from 'typeorm';
import { beginWith, carriedStatement } from '../lib/connection/begin-with.js';
import {
  LazyTransaction,
  TransactionAbortedError,
  TransactionEndedError,
} from '../lib/data-layers/lazy-transaction.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/**
 * `BEGIN` sent in front of a transaction's first statement, in one round trip, on a real
 * PostgreSQL: the statement runs inside the transaction, a failed `BEGIN` never lets it run
 * on its own, and the caller sees the statement's result alone.
 */
describe('beginWith: BEGIN and the first statement in one round trip', () => {
  let database: TestDatabase;
  let pool: pg.Pool;
  const count = async () =>
    Number((await pool.query('SELECT count(*) AS n FROM rows_here')).rows[0].n);

  beforeAll(async () => {
    database = await createTestDatabase('begin_with');
    pool = new pg.Pool({ connectionString: database.url, max: 3 });
    await pool.query('CREATE TABLE rows_here (id int PRIMARY KEY, note text)');
  });
  afterEach(() => pool.query('TRUNCATE rows_here'));
  afterAll(async () => {
    await pool?.end();
    await database?.drop();
  });

  it('runs the statement inside the transaction: a ROLLBACK undoes it', async () => {
    const client = await pool.connect();
    try {
      const { result: sent, begun } = beginWith(
        client,
        'BEGIN',
        'INSERT INTO rows_here (id, note) VALUES ($1, $2) RETURNING id, note',
        [1, 'one'],
      );
      const result = await sent;
      await expect(begun).resolves.toBeUndefined();
      // The statement's own result, not BEGIN's: TypeORM reads these fields.
      expect(result.command).toBe('INSERT');
      expect(result.rowCount).toBe(1);
      expect(result.rows).toEqual([{ id: 1, note: 'one' }]);
      expect((await client.query('SELECT txid_current_if_assigned() AS x')).rows[0].x).not.toBe(
        null,
      );
      expect(await count()).toBe(0); // not visible outside: not committed
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    expect(await count()).toBe(0);
  });

  it('commits with the transaction’s COMMIT', async () => {
    const client = await pool.connect();
    try {
      await beginWith(
        client,
        'BEGIN ISOLATION LEVEL SERIALIZABLE',
        'INSERT INTO rows_here (id) VALUES ($1)',
        [2],
      ).result;
      expect((await client.query('SHOW transaction_isolation')).rows[0].transaction_isolation).toBe(
        'serializable',
      );
      await client.query('COMMIT');
    } finally {
      client.release();
    }
    expect(await count()).toBe(1);
  });

  it('never runs the statement when BEGIN fails', async () => {
    const client = await pool.connect();
    try {
      const { result, begun } = beginWith(
        client,
        'BEGIN ISOLATION LEVEL NONSENSE',
        'INSERT INTO rows_here (id) VALUES ($1)',
        [3],
      );
      await expect(result).rejects.toMatchObject({ code: '42601' });
      // What comes after must not run: there is no transaction to run in.
      await expect(begun).rejects.toMatchObject({ code: '42601' });
      // The connection is usable, and no transaction was left open.
      expect((await client.query('SELECT txid_current_if_assigned() AS x')).rows[0].x).toBe(null);
    } finally {
      client.release();
    }
    expect(await count()).toBe(0);
  });

  it('leaves an aborted transaction, not a half-applied one, when the statement fails', async () => {
    await pool.query('INSERT INTO rows_here (id) VALUES (4)');
    const client = await pool.connect();
    try {
      const { result, begun } = beginWith(
        client,
        'BEGIN',
        'INSERT INTO rows_here (id) VALUES ($1)',
        [4],
      );
      await expect(result).rejects.toMatchObject({ code: '23505' });
      await expect(begun).resolves.toBeUndefined(); // BEGIN ran: the transaction is open
      await expect(client.query('SELECT 1')).rejects.toMatchObject({ code: '25P02' });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
  });

  const insert = 'INSERT INTO t VALUES ($1)';
  it.each([
    [[insert, [1]], { text: insert, values: [1] }],
    [['SELECT 1', []], undefined], // the simple protocol: no Sync to share
    [['SELECT 1'], undefined],
    [[{ text: 'SELECT 1', submit: () => undefined }], undefined],
    [[insert, [1], () => undefined], undefined], // a callback
    [[{ text: insert, values: [1], callback: () => undefined }], undefined], // one in the config
    // Prisma, Drizzle: how rows are read goes with the statement.
    [
      [{ text: insert, values: [1], rowMode: 'array' }],
      { text: insert, values: [1], rowMode: 'array' },
    ],
    [[{ name: 'p1', text: insert, values: [1] }], undefined], // a prepared name
    [[{ text: 'SELECT 1', values: [] }], undefined],
  ])('carries %j as %j', (args, expected) => {
    expect(carriedStatement(args as unknown[])).toEqual(expected);
  });
});

/**
 * The request's transaction (`LazyTransaction`) on a real DataSource, where statements sent on
 * its connection can race its end: none of them may ever run outside it.
 */
describe('LazyTransaction: statements racing the first one and the end', () => {
  let database: TestDatabase;
  let dataSource: DataSource;
  const pool = (source: DataSource) => () =>
    (source.driver as unknown as { master: pg.Pool }).master;
  const count = async () =>
    Number(((await dataSource.query('SELECT count(*) AS n FROM raced')) as { n: string }[])[0].n);

  beforeAll(async () => {
    database = await createTestDatabase('lazy_race');
    dataSource = new DataSource({ type: 'postgres', url: database.url });
    await dataSource.initialize();
    await dataSource.query('CREATE TABLE raced (id int PRIMARY KEY)');
  });
  afterEach(() => dataSource.query('TRUNCATE raced'));
  afterAll(async () => {
    await dataSource?.destroy();
    await database?.drop();
  });

  it('refuses a statement that was waiting for BEGIN when the transaction rolls back', async () => {
    const transaction = new LazyTransaction(dataSource, pool(dataSource), 5000, true);
    // The connection TypeORM's runner is given: TypeORM queues its own statements one at a
    // time, but code holding the connection (a stream, a driver call) need not.
    const connection = (await transaction.manager.queryRunner!.connect()) as pg.PoolClient;
    // The first write is on its way (BEGIN with it) for 300 ms.
    const first = connection.query('INSERT INTO raced (id) SELECT $1::int FROM pg_sleep(0.3)', [1]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const second = connection.query('INSERT INTO raced (id) VALUES ($1)', [2]);
    await transaction.rollback();
    const [one, two] = await Promise.allSettled([first, second]);
    expect(one.status).toBe('fulfilled'); // it ran inside, and was rolled back
    // It never ran: not after the ROLLBACK, on its own.
    expect(two).toMatchObject({ status: 'rejected', reason: expect.any(TransactionEndedError) });
    expect(await count()).toBe(0);
  });

  it('runs a statement that was waiting for BEGIN apart, once the transaction committed', async () => {
    const transaction = new LazyTransaction(dataSource, pool(dataSource), 5000, true);
    const connection = (await transaction.manager.queryRunner!.connect()) as pg.PoolClient;
    const first = connection.query('INSERT INTO raced (id) SELECT $1::int FROM pg_sleep(0.3)', [1]);
    await new Promise((resolve) => setTimeout(resolve, 100));
    // Left running: it reaches the connection while the commit is under way.
    const second = connection.query('INSERT INTO raced (id) VALUES ($1)', [2]);
    const committed = await transaction.commitWith({
      name: 'raced_fence',
      text: 'UPDATE raced SET id = id WHERE id = $1',
      values: [1],
    });
    expect(committed).toBe(true);
    const [one, two] = await Promise.allSettled([first, second]);
    expect(one.status).toBe('fulfilled');
    // It waited for the commit's outcome, then ran on a connection of its own.
    expect(two.status).toBe('fulfilled');
    expect(await count()).toBe(2);
  });

  it.each([
    ["SELECT set_config('app.tenant', $1, true)", 'a setting made local to the transaction'],
    ['SELECT pg_advisory_xact_lock(hashtext($1))', 'an advisory lock held for the transaction'],
  ])('runs %s in the transaction: %s lasts', async (sql) => {
    const transaction = new LazyTransaction(dataSource, pool(dataSource), 5000, true);
    await transaction.manager.query(sql, ['7']);
    // It opened the transaction, rather than running alone on a connection of its own.
    expect(transaction.begun).toBe(true);
    await transaction.rollback();
  });

  it('runs nothing outside when BEGIN fails, and refuses to commit', async () => {
    const isolating = new DataSource({ type: 'postgres', url: database.url });
    await isolating.initialize();
    // A level PostgreSQL refuses (TypeORM checks the option only at start-up): BEGIN fails.
    (isolating.options as { isolationLevel?: string }).isolationLevel = 'NONSENSE';
    try {
      const transaction = new LazyTransaction(isolating, pool(isolating), 5000, true);
      const connection = (await transaction.manager.queryRunner!.connect()) as pg.PoolClient;
      const first = connection.query('INSERT INTO raced (id) VALUES ($1)', [1]);
      const second = connection.query('INSERT INTO raced (id) VALUES ($1)', [2]);
      const [one, two] = await Promise.allSettled([first, second]);
      expect(one).toMatchObject({ status: 'rejected', reason: { code: '42601' } });
      expect(two).toMatchObject({ status: 'rejected', reason: { code: '42601' } });
      await expect(
        transaction.commitWith({
          name: 'raced_fence',
          text: 'UPDATE raced SET id = id WHERE id = $1',
          values: [1],
        }),
      ).rejects.toBeInstanceOf(TransactionAbortedError);
      expect(await count()).toBe(0);
    } finally {
      await isolating.destroy();
    }
  });
});
