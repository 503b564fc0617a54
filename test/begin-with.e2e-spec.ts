import pg from 'pg';
import { beginWith, canBeginWith } from '../lib/storage/begin-with.js';
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
      const result = await beginWith(
        client,
        'BEGIN',
        'INSERT INTO rows_here (id, note) VALUES ($1, $2) RETURNING id, note',
        [1, 'one'],
      );
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
      );
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
      await expect(
        beginWith(
          client,
          'BEGIN ISOLATION LEVEL NONSENSE',
          'INSERT INTO rows_here (id) VALUES ($1)',
          [3],
        ),
      ).rejects.toMatchObject({ code: '42601' });
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
      await expect(
        beginWith(client, 'BEGIN', 'INSERT INTO rows_here (id) VALUES ($1)', [4]),
      ).rejects.toMatchObject({ code: '23505' });
      await expect(client.query('SELECT 1')).rejects.toMatchObject({ code: '25P02' });
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
  });

  it.each([
    [['INSERT INTO t VALUES ($1)', [1]], true],
    [['SELECT 1', []], false], // the simple protocol: no Sync to share
    [['SELECT 1'], false],
    [[{ text: 'SELECT 1', submit: () => undefined }], false],
    [['INSERT INTO t VALUES ($1)', [1], () => undefined], false], // a callback
  ])('carries %j: %s', (args, expected) => {
    expect(canBeginWith(args as unknown[])).toBe(expected);
  });
});
