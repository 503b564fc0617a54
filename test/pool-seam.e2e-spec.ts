import { readFileSync } from 'node:fs';
import { Body, Controller, Get, type INestApplication, Logger, Module, Post } from '@nestjs/common';
import { jest } from '@jest/globals';
import pg, { type Pool, type PoolClient } from 'pg';
import request from 'supertest';
import { Idempotent, IdempotencyModule, PhaseRunner } from '../lib/index.js';
import { ADAPTERS, bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { createTestPool, endTestPool } from './support/test-pool.js';

/**
 * The data-layer seam at its lowest: an app with no TypeORM, whose handlers write through the
 * node-postgres pool they gave the library (as Prisma's adapter, Drizzle and Kysely do), with
 * the statements those layers send for their own transactions. Each cell counts rows.
 */
const POOL = Symbol('POOL');
let pool: Pool;
/** A second pool on the same database that the library was not given. */
let otherPool: Pool;

interface Body_ {
  tag: string;
}

@Controller()
class LedgerController {
  constructor(private readonly phases: PhaseRunner) {}

  private insert(db: Pick<Pool, 'query'> | PoolClient, tag: string, note = 'main') {
    return db.query('INSERT INTO ledger (tag, note) VALUES ($1, $2)', [tag, note]);
  }

  @Post('plain')
  @Idempotent()
  async plain(@Body() body: Body_) {
    await this.insert(pool, body.tag);
    return { tag: body.tag };
  }

  /** Drizzle's and Prisma's way of sending a write: a config object. */
  @Post('config-object')
  @Idempotent()
  async configObject(@Body() body: Body_) {
    await pool.query({
      text: 'INSERT INTO ledger (tag, note) VALUES ($1, $2)',
      values: [body.tag, 'main'],
      rowMode: 'array',
    });
    return { tag: body.tag };
  }

  /** A read before the write runs apart; the write opens the transaction. */
  @Post('read-then-write')
  @Idempotent()
  async readThenWrite(@Body() body: Body_) {
    const before = await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM ledger');
    await this.insert(pool, body.tag);
    return { before: before.rows[0].n };
  }

  /** Drizzle's and Kysely's way: a connection of the pool, BEGIN and COMMIT on it. */
  @Post('nested')
  @Idempotent()
  async nested(@Body() body: Body_) {
    await this.insert(pool, body.tag, 'outer');
    const client = await pool.connect();
    try {
      await client.query('begin');
      await this.insert(client, body.tag, 'kept');
      await client.query('commit');
      await client.query('BEGIN');
      await this.insert(client, body.tag, 'dropped');
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    return { tag: body.tag };
  }

  /** Prisma's way: BEGIN then SET TRANSACTION ISOLATION LEVEL, as the request's first work. */
  @Post('isolation')
  @Idempotent()
  async isolation(@Body() body: Body_) {
    const client = await pool.connect();
    try {
      await client.query({ text: 'BEGIN' });
      await client.query({ text: 'SET TRANSACTION ISOLATION LEVEL SERIALIZABLE' });
      const { rows } = await client.query<{ level: string }>({
        text: "SELECT current_setting('transaction_isolation') AS level",
      });
      await this.insert(client, body.tag);
      await client.query({ text: 'COMMIT' });
      return { level: rows[0].level };
    } finally {
      client.release();
    }
  }

  /**
   * Above READ COMMITTED, held past several heartbeats (every leaseMs / 3): a renewal that
   * committed apart after the transaction's snapshot would fail its stored answer.
   */
  @Post('isolated-slow')
  @Idempotent({ isolationLevel: 'SERIALIZABLE', leaseMs: 600 })
  async isolatedSlow(@Body() body: Body_) {
    await this.insert(pool, body.tag);
    await new Promise((resolve) => setTimeout(resolve, 1000));
    return { tag: body.tag };
  }

  /** A stronger level after the first write: refused, never run weaker. */
  @Post('isolation-late')
  @Idempotent()
  async isolationLate(@Body() body: Body_) {
    await this.insert(pool, body.tag);
    const client = await pool.connect();
    try {
      await client.query('begin isolation level serializable');
      await this.insert(client, body.tag, 'late');
      await client.query('commit');
    } finally {
      client.release();
    }
    return { tag: body.tag };
  }

  /** A failed statement the handler swallows: PostgreSQL aborted the transaction. */
  @Post('swallowed')
  @Idempotent()
  async swallowed(@Body() body: Body_) {
    await this.insert(pool, body.tag);
    await pool
      .query('INSERT INTO ledger (tag, note) VALUES (NULL, $1)', ['x'])
      .catch(() => undefined);
    return { tag: body.tag };
  }

  /**
   * A passing failure the handler catches (its lock wait on the row tagged `locked` timed out)
   * before it writes again: that write fails with 25P02, which the handler throws.
   */
  @Post('caught-lock-timeout')
  @Idempotent()
  async caughtLockTimeout(@Body() body: Body_) {
    await this.insert(pool, body.tag);
    await pool.query(`SET LOCAL lock_timeout = '50ms'`);
    await pool
      .query(`SELECT id FROM ledger WHERE tag = 'locked' FOR UPDATE`)
      .catch(() => undefined);
    await this.insert(pool, body.tag, 'after');
    return { tag: body.tag };
  }

  /** A failed statement inside a nested transaction that rolls back: the rest commits. */
  @Post('nested-failure')
  @Idempotent()
  async nestedFailure(@Body() body: Body_) {
    await this.insert(pool, body.tag, 'outer');
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query('INSERT INTO ledger (tag, note) VALUES (NULL, $1)', ['x']);
      await client.query('COMMIT');
    } catch {
      await client.query('ROLLBACK');
    } finally {
      client.release();
    }
    return { tag: body.tag };
  }

  @Post('commit-by-hand')
  @Idempotent()
  async commitByHand(@Body() body: Body_) {
    await this.insert(pool, body.tag);
    await pool.query('COMMIT');
    return { tag: body.tag };
  }

  @Post('throws')
  @Idempotent()
  async throws(@Body() body: Body_) {
    await this.insert(pool, body.tag);
    throw new Error('the handler failed after its write');
  }

  /** The same write and failure as `throws`, on a pool the library was not given. */
  @Post('other-pool')
  @Idempotent()
  async onOtherPool(@Body() body: Body_) {
    await this.insert(otherPool, body.tag);
    throw new Error('the handler failed after its write');
  }

  /** Not idempotent: the pool is as it always was. */
  @Post('outside')
  async outside(@Body() body: Body_) {
    await this.insert(pool, body.tag);
    return { tag: body.tag };
  }

  @Post('phases')
  @Idempotent()
  async withPhases(@Body() body: Body_) {
    await this.phases.run('first', async () => {
      await this.insert(pool, body.tag, 'first');
    });
    const key = await this.phases.run('second', async (_manager, { idempotencyKey }) => {
      await this.insert(pool, body.tag, 'second');
      return idempotencyKey;
    });
    return this.phases.finish(async () => {
      await this.insert(pool, body.tag, 'finish');
      return { derivedKey: key.length > 0 };
    });
  }

  @Post('phase-manager')
  @Idempotent()
  async phaseManager() {
    return this.phases.run('uses-manager', (manager) => manager.query('SELECT 1'));
  }

  @Get('health')
  health() {
    return { ok: true };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool }),
    }),
  ],
  controllers: [LedgerController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class PoolAppModule {}

describe.each(ADAPTERS)('a data layer on a node-postgres pool (%s)', (adapter) => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase(`pool_seam_${adapter}`);
    pool = createTestPool({ connectionString: database.url, max: 4 });
    otherPool = createTestPool({ connectionString: database.url, max: 2 });
    await pool.query(readFileSync('migrations/schema.sql', 'utf8'));
    await pool.query(
      'CREATE TABLE ledger (id serial PRIMARY KEY, tag text NOT NULL, note text NOT NULL)',
    );
    app = await bootstrapTestApp(PoolAppModule, adapter);
  });
  afterAll(async () => {
    // The app first (it releases the connections it holds), then every socket of both pools
    // closed (see endTestPool), and only then the drop: it must find no session to kill.
    await app?.close();
    await Promise.all([endTestPool(pool), endTestPool(otherPool)]);
    await database?.drop();
  });

  const notes = async (tag: string) =>
    (
      await pool.query<{ note: string }>('SELECT note FROM ledger WHERE tag = $1 ORDER BY id', [
        tag,
      ])
    ).rows.map((row) => row.note);
  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);

  it('commits the handler’s write with its answer, and replays it without running it again', async () => {
    const first = await post('/plain', 'plain-1', { tag: 'plain-1' });
    expect(first.status).toBe(201);
    const again = await post('/plain', 'plain-1', { tag: 'plain-1' });
    expect(again.status).toBe(201);
    expect(again.text).toBe(first.text);
    expect(await notes('plain-1')).toEqual(['main']);
  });

  it.each([
    ['a write as text and values', '/plain'],
    ['a write as a config object', '/config-object'],
  ])(
    'costs three round trips for %s: the claim, BEGIN with the write, the answer with COMMIT',
    async (_name, path) => {
      const sent: string[] = [];
      const query = pg.Client.prototype.query;
      pg.Client.prototype.query = function (this: pg.Client, ...args: unknown[]) {
        const config = args[0] as string | { text?: string; begin?: string; name?: string };
        const text = typeof config === 'string' ? config : (config.text ?? '');
        const begin = typeof config === 'string' ? undefined : config.begin;
        sent.push(begin ? `${begin}; ${text}` : text);
        return (query as (...a: unknown[]) => unknown).apply(this, args);
      } as typeof query;
      try {
        const answer = await post(path, `rt-${path}`, { tag: `rt-${path}` });
        expect(answer.status).toBe(201);
      } finally {
        pg.Client.prototype.query = query;
      }
      expect(sent).toHaveLength(3);
      expect(sent[0]).toMatch(/INSERT INTO idempotency_keys/);
      expect(sent[1]).toMatch(/^BEGIN ISOLATION LEVEL READ COMMITTED; INSERT INTO ledger/);
      expect(sent[2]).toMatch(/UPDATE idempotency_keys/);
      expect(await notes(`rt-${path}`)).toEqual(['main']);
    },
  );

  it('runs one of eight concurrent requests with one key', async () => {
    const answers = await Promise.all(
      Array.from({ length: 8 }, () => post('/plain', 'race-1', { tag: 'race-1' })),
    );
    for (const answer of answers) expect([201, 409]).toContain(answer.status);
    expect(await notes('race-1')).toEqual(['main']);
  });

  it('reads before the first write apart, then writes in the request’s transaction', async () => {
    const answer = await post('/read-then-write', 'rtw-1', { tag: 'rtw-1' });
    expect(answer.status).toBe(201);
    expect(await notes('rtw-1')).toEqual(['main']);
  });

  it('nests a transaction on a connection of the pool as a savepoint: its commit is kept, its rollback is not', async () => {
    const answer = await post('/nested', 'nested-1', { tag: 'nested-1' });
    expect(answer.status).toBe(201);
    expect(await notes('nested-1')).toEqual(['outer', 'kept']);
  });

  it('begins the request’s transaction at the level a first nested transaction asks for', async () => {
    const answer = await post('/isolation', 'iso-1', { tag: 'iso-1' });
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ level: 'serializable' });
    expect(await notes('iso-1')).toEqual(['main']);
  });

  it('keeps a SERIALIZABLE request held past its heartbeats: 201, one row, the lease renewed inside it', async () => {
    const answer = await post('/isolated-slow', 'iso-slow-1', { tag: 'iso-slow-1' });
    expect(answer.status).toBe(201);
    expect(await notes('iso-slow-1')).toEqual(['main']);
    const again = await post('/isolated-slow', 'iso-slow-1', { tag: 'iso-slow-1' });
    expect(again.text).toBe(answer.text);
  });

  it('refuses a stronger level after the first write, and rolls everything back', async () => {
    const answer = await post('/isolation-late', 'iso-late-1', { tag: 'iso-late-1' });
    expect(answer.status).toBe(500);
    expect(await notes('iso-late-1')).toEqual([]);
  });

  // What the request met is the lock timeout, not the "transaction is aborted" of the write
  // after it: a 503 database_transient, nothing stored, and the retry runs once the row is
  // free. Before, the 25P02 was taken for the handler's own error: a stored 500.
  it('answers 503 for a lock timeout the handler caught before writing again, and the retry runs', async () => {
    await pool.query(`INSERT INTO ledger (tag, note) VALUES ('locked', 'held')`);
    const holder = await otherPool.connect();
    try {
      await holder.query('BEGIN');
      await holder.query(`SELECT id FROM ledger WHERE tag = 'locked' FOR UPDATE`);
      const answer = await post('/caught-lock-timeout', 'caught-1', { tag: 'caught-1' });
      expect({ status: answer.status, code: answer.body.code }).toEqual({
        status: 503,
        code: 'database_transient',
      });
      expect(answer.headers['retry-after']).toBeDefined();
      expect(await notes('caught-1')).toEqual([]);
      await holder.query('COMMIT');
    } finally {
      holder.release();
    }
    const retry = await post('/caught-lock-timeout', 'caught-1', { tag: 'caught-1' });
    expect(retry.status).toBe(201);
    expect(await notes('caught-1')).toEqual(['main', 'after']);
  });

  it('answers 500 transaction_aborted for a failed statement the handler swallowed, storing nothing', async () => {
    const answer = await post('/swallowed', 'swallowed-1', { tag: 'swallowed-1' });
    expect(answer.status).toBe(500);
    expect(answer.body).toMatchObject({ code: 'transaction_aborted' });
    expect(await notes('swallowed-1')).toEqual([]);
    const { rows } = await pool.query(
      'SELECT 1 FROM idempotency_keys WHERE key = $1 AND response_code IS NOT NULL',
      ['swallowed-1'],
    );
    expect(rows).toHaveLength(0);
  });

  it('keeps the request’s work when a nested transaction fails and rolls back', async () => {
    const answer = await post('/nested-failure', 'nested-fail-1', { tag: 'nested-fail-1' });
    expect(answer.status).toBe(201);
    expect(await notes('nested-fail-1')).toEqual(['outer']);
  });

  it('refuses a COMMIT sent through the pool, and rolls back', async () => {
    const answer = await post('/commit-by-hand', 'commit-1', { tag: 'commit-1' });
    expect(answer.status).toBe(500);
    expect(await notes('commit-1')).toEqual([]);
    const again = await post('/commit-by-hand', 'commit-1', { tag: 'commit-1' });
    expect(again.text).toBe(answer.text);
    expect(await notes('commit-1')).toEqual([]);
  });

  it('rolls the write back when the handler throws, and stores its 500', async () => {
    const answer = await post('/throws', 'throws-1', { tag: 'throws-1' });
    expect(answer.status).toBe(500);
    expect(await notes('throws-1')).toEqual([]);
    const again = await post('/throws', 'throws-1', { tag: 'throws-1' });
    expect(again.text).toBe(answer.text);
    expect(await notes('throws-1')).toEqual([]);
  });

  it('says so when a write goes through a pool the library was not given: that write commits apart (the control)', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const answer = await post('/other-pool', 'other-1', { tag: 'other-1' });
      expect(answer.status).toBe(500);
      // Not rolled back with the request: this is what the shared pool prevents.
      expect(await notes('other-1')).toEqual(['main']);
      const warnings = warn.mock.calls.map(([message]) => String(message));
      expect(warnings.filter((message) => message.includes('not the one given'))).toHaveLength(1);
    } finally {
      warn.mockRestore();
    }
  });

  it('leaves the pool as it was outside an idempotent request', async () => {
    const answer = await request(app.getHttpServer()).post('/outside').send({ tag: 'outside-1' });
    expect(answer.status).toBe(201);
    expect(await notes('outside-1')).toEqual(['main']);
  });

  it('commits each phase with its recovery point, and the last with the answer', async () => {
    const answer = await post('/phases', 'phases-1', { tag: 'phases-1' });
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ derivedKey: true });
    const again = await post('/phases', 'phases-1', { tag: 'phases-1' });
    expect(again.text).toBe(answer.text);
    expect(await notes('phases-1')).toEqual(['first', 'second', 'finish']);
  });

  it('says what to use instead when a phase uses TypeORM’s manager on a pool', async () => {
    const answer = await post('/phase-manager', 'manager-1', {});
    expect(answer.status).toBe(500);
  });
});
