import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 4: read-only work in a transaction of the handler's own, as
 * `ReadOnlyTransactionRefusedError` tells it to ("open a transaction for the read-only work"),
 * on a client of the pool (what Drizzle's `db.transaction(…, { accessMode: 'read only' })`
 * and Kysely's `setAccessMode('read only')` send, or pg by hand). On the pool seam its `BEGIN`
 * becomes a savepoint of the request's transaction (pool-transaction.ts `onView`), and:
 *
 * - `BEGIN; SET TRANSACTION READ ONLY; …; COMMIT`: the `SET` runs inside the savepoint (no
 *   check applies inside a nested transaction); PostgreSQL ends the mode with the savepoint's
 *   `RELEASE`, so the handler's next write is kept: this HELD (201), kept as a guard.
 * - `BEGIN READ ONLY` (one text, Drizzle's and Kysely's spelling): `nestedControlOf` keeps its
 *   level but drops its mode, so a write inside it, which PostgreSQL refuses without the
 *   library (25006), succeeds in silence and commits with the answer.
 */
let pool: Pool;

/** Reads in a read-only transaction of its own, then writes its slot. */
async function reportThenWrite(slot: string) {
  const client = await pool.connect();
  let n: number;
  try {
    await client.query('BEGIN');
    await client.query('SET TRANSACTION READ ONLY');
    const { rows } = await client.query<{ n: number }>('SELECT count(*)::int AS n FROM slots');
    n = rows[0].n;
    await client.query('COMMIT');
  } finally {
    client.release();
  }
  await pool.query('INSERT INTO slots (slot) VALUES ($1)', [slot]);
  return { slot, n: n >= 0 };
}

/** A write, by mistake, inside a transaction the handler opened read only: refused. */
async function writeInReadOnly(slot: string) {
  const client = await pool.connect();
  try {
    await client.query('BEGIN READ ONLY');
    try {
      await client.query('INSERT INTO slots (slot) VALUES ($1)', [slot]);
      await client.query('COMMIT');
      return { slot, written: true };
    } catch (error) {
      await client.query('ROLLBACK');
      return { slot, written: false, code: (error as { code?: string }).code };
    }
  } finally {
    client.release();
  }
}

/** The same mistake, not caught: the handler's own error (either spelling of the mode). */
async function writeInReadOnlyUncaught(slot: string, spelling: string) {
  const client = await pool.connect();
  try {
    // Each statement of the spelling on its own, as a data layer sends them.
    for (const statement of spelling.split('; ')) await client.query(statement);
    await client.query('INSERT INTO slots (slot) VALUES ($1)', [slot]);
    await client.query('COMMIT');
    return { slot };
  } finally {
    await client.query('ROLLBACK').catch(() => undefined);
    client.release();
  }
}

@Controller()
class ReportController {
  @Post('write-in-read-only-uncaught')
  @Idempotent()
  writeUncaught(@Body() body: { slot: string; spelling: string }) {
    return writeInReadOnlyUncaught(body.slot, body.spelling);
  }

  @Post('plain/write-in-read-only-uncaught')
  plainWriteUncaught(@Body() body: { slot: string; spelling: string }) {
    return writeInReadOnlyUncaught(body.slot, body.spelling);
  }

  @Post('report-then-write')
  @Idempotent()
  report(@Body() body: { slot: string }) {
    return reportThenWrite(body.slot);
  }

  @Post('plain/report-then-write')
  plainReport(@Body() body: { slot: string }) {
    return reportThenWrite(body.slot);
  }

  @Post('write-in-read-only')
  @Idempotent()
  write(@Body() body: { slot: string }) {
    return writeInReadOnly(body.slot);
  }

  @Post('plain/write-in-read-only')
  plainWrite(@Body() body: { slot: string }) {
    return writeInReadOnly(body.slot);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReportController],
})
class ReportModule {}

describe('adversary 4: a read-only transaction of the handler own, on the pool', () => {
  let fixture: PoolApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv4_nested_read_only', {
      module: ReportModule,
      max: 2,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const kept = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;

  it('BEGIN; SET TRANSACTION READ ONLY; …; COMMIT, then a write: 201 as without the library', async () => {
    const plain = await post('/plain/report-then-write', 'p1', { slot: 'plain-report' });
    expect({ status: plain.status, kept: await kept('plain-report') }).toEqual({
      status: 201,
      kept: 1,
    });
    const first = await post('/report-then-write', 'report', { slot: 'report' });
    const retry = await post('/report-then-write', 'report', { slot: 'report' });
    expect({
      status: first.status,
      body: first.body as unknown,
      kept: await kept('report'),
      replayed: retry.headers['idempotent-replayed'],
    }).toEqual({
      status: 201,
      body: { slot: 'report', n: true },
      kept: 1,
      replayed: 'true',
    });
  }, 30_000);

  it('BEGIN READ ONLY, then a write inside it: refused as without the library (25006)', async () => {
    const plain = await post('/plain/write-in-read-only', 'p2', { slot: 'plain-write' });
    expect({
      status: plain.status,
      body: plain.body as unknown,
      kept: await kept('plain-write'),
    }).toEqual({
      status: 201,
      body: { slot: 'plain-write', written: false, code: '25006' },
      kept: 0,
    });
    const first = await post('/write-in-read-only', 'write', { slot: 'write' });
    expect({
      status: first.status,
      body: first.body as unknown,
      kept: await kept('write'),
    }).toEqual({
      status: 201,
      body: { slot: 'write', written: false, code: '25006' },
      kept: 0,
    });
    // Observed: { written: true }, the row kept: the READ ONLY of the BEGIN was dropped.
  }, 30_000);

  it.each([
    ['BEGIN READ ONLY', 'BEGIN READ ONLY'],
    ['BEGIN; SET TRANSACTION READ ONLY', 'BEGIN; SET TRANSACTION READ ONLY'],
  ])(
    '%s, a write inside it not caught: the handler’s 500 as without the library, stored, never a 503',
    async (_name, spelling) => {
      const slot = `u-${Buffer.from(spelling).toString('base64url')}`;
      const plain = await post('/plain/write-in-read-only-uncaught', `p-${slot}`, {
        slot: `plain-${slot}`,
        spelling,
      });
      expect({ status: plain.status, kept: await kept(`plain-${slot}`) }).toEqual({
        status: 500,
        kept: 0,
      });
      const first = await post('/write-in-read-only-uncaught', slot, { slot, spelling });
      const retry = await post('/write-in-read-only-uncaught', slot, { slot, spelling });
      expect({
        status: first.status,
        retryAfter: first.headers['retry-after'],
        replayed: retry.status === first.status && retry.headers['idempotent-replayed'],
        kept: await kept(slot),
      }).toEqual({ status: 500, retryAfter: undefined, replayed: 'true', kept: 0 });
    },
    30_000,
  );
});
