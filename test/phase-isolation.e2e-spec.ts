import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import pg, { type Pool } from 'pg';
import request from 'supertest';
import { type EntityManager } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  Idempotent,
  IdempotencyModule,
  PhaseRunner,
} from '../lib/index.js';
import { ADAPTERS, bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';

/**
 * Atomic phases whose transaction runs above READ COMMITTED, held past the heartbeat's
 * renewals (every leaseMs / 3). A renewal that committed apart after the phase's snapshot
 * made its fenced recovery-point update fail to serialize (503 on every try): the phase's
 * BEGIN waits for the renewal on its way, and renewals run inside it while it is open.
 * On TypeORM the level is the DataSource's (TypeORM 1's `isolationLevel` option); on a
 * node-postgres pool, the one the phase's own nested transaction asks for (Prisma's way).
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const HOLD_MS = 1000;

interface Tagged {
  tag: string;
}

let databaseUrl = '';
/** The test's own connections: nothing of the library's. */
let outside: Pool;

/** Takes the key's lease away as a takeover would: the fence (lock_version) moves on. */
function steal(key: string) {
  return outside.query(
    'UPDATE idempotency_keys SET lock_version = lock_version + 1 WHERE key = $1',
    [key],
  );
}

@Controller()
class TypeOrmController {
  constructor(private readonly phases: PhaseRunner) {}

  private insert(manager: EntityManager, tag: string, note: string) {
    return manager.query('INSERT INTO ledger (tag, note) VALUES ($1, $2)', [tag, note]);
  }

  @Post('slow-phase')
  @Idempotent({ leaseMs: 600 })
  async slowPhase(@Body() body: Tagged) {
    const level = await this.phases.run('held', async (manager) => {
      await this.insert(manager, body.tag, 'held');
      await sleep(HOLD_MS);
      return levelOf(manager);
    });
    return this.phases.finish(async (manager) => {
      await this.insert(manager, body.tag, 'finish');
      return { level };
    });
  }

  @Post('slow-record')
  @Idempotent({ leaseMs: 600 })
  async slowRecord(@Body() body: Tagged) {
    const recorded = await this.phases.call(
      'called',
      ({ idempotencyKey }) => Promise.resolve(idempotencyKey.length > 0),
      async (manager, result) => {
        await this.insert(manager, body.tag, 'record');
        await sleep(HOLD_MS);
        return result;
      },
    );
    return this.phases.finish(() => Promise.resolve({ recorded }));
  }

  @Post('slow-finish')
  @Idempotent({ leaseMs: 600 })
  async slowFinish(@Body() body: Tagged) {
    await this.phases.run('quick', (manager) => this.insert(manager, body.tag, 'quick'));
    return this.phases.finish(async (manager) => {
      await this.insert(manager, body.tag, 'finish');
      await sleep(HOLD_MS);
      return { level: await levelOf(manager) };
    });
  }

  /**
   * The lease is lost after the phase's snapshot and before any renewal ran inside it (the
   * first comes a third of the 3 s lease after the claim): the phase must commit nothing.
   */
  @Post('stolen')
  @Idempotent({ leaseMs: 3000 })
  async stolen(@Body() body: Tagged & { key: string }) {
    await this.phases.run('held', async (manager) => {
      // The key taken away just before the phase's transaction begins (at its first write: a
      // read before it would run apart). Once begun, the transaction holds the key's row (its
      // BEGIN renews the lease, see `holdAtBegin`): a takeover then skips the row and answers
      // 409, so a lease is lost between phases, not inside one.
      await steal(body.key);
      await this.insert(manager, body.tag, 'held');
      await sleep(1500);
    });
    return this.phases.finish(async (manager) => {
      await this.insert(manager, body.tag, 'finish');
      return {};
    });
  }
}

async function levelOf(manager: EntityManager): Promise<string> {
  const rows = (await manager.query(
    "SELECT current_setting('transaction_isolation') AS level",
  )) as { level: string }[];
  return rows[0].level;
}

let pool: Pool;

@Controller()
class PoolController {
  constructor(private readonly phases: PhaseRunner) {}

  /** The phase's work opens a transaction of its own at `level`, as Prisma's does. */
  @Post('slow-phase')
  @Idempotent({ leaseMs: 600 })
  async slowPhase(@Body() body: Tagged & { level: string }) {
    const level = await this.phases.run('held', async () => {
      const client = await pool.connect();
      try {
        await client.query({ text: 'BEGIN' });
        await client.query({ text: `SET TRANSACTION ISOLATION LEVEL ${body.level}` });
        await client.query('INSERT INTO ledger (tag, note) VALUES ($1, $2)', [body.tag, 'held']);
        await sleep(HOLD_MS);
        const { rows } = await client.query<{ level: string }>(
          "SELECT current_setting('transaction_isolation') AS level",
        );
        await client.query({ text: 'COMMIT' });
        return rows[0].level;
      } finally {
        client.release();
      }
    });
    return this.phases.finish(async () => {
      await pool.query('INSERT INTO ledger (tag, note) VALUES ($1, $2)', [body.tag, 'finish']);
      return { level };
    });
  }
}

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      useFactory: () => ({
        type: 'postgres' as const,
        url: databaseUrl,
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        // TypeORM 1's option: every transaction of the DataSource, phases' included.
        isolationLevel: 'SERIALIZABLE',
      }),
    }),
    IdempotencyModule.forRoot({ globalKeys: true }),
  ],
  controllers: [TypeOrmController],
})
class TypeOrmAppModule {}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PoolController],
})
class PoolAppModule {}

describe.each(ADAPTERS)('phases above READ COMMITTED held past the heartbeat (%s)', (adapter) => {
  let database: TestDatabase;
  let typeormApp: INestApplication;
  let poolApp: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase(`phase_isolation_${adapter}`);
    databaseUrl = database.url;
    outside = new pg.Pool({ connectionString: database.url, max: 2 });
    pool = new pg.Pool({ connectionString: database.url, max: 4 });
    typeormApp = await bootstrapTestApp(TypeOrmAppModule, adapter);
    await outside.query(
      'CREATE TABLE ledger (id serial PRIMARY KEY, tag text NOT NULL, note text NOT NULL)',
    );
    poolApp = await bootstrapTestApp(PoolAppModule, adapter);
  });
  afterAll(async () => {
    await typeormApp?.close();
    await poolApp?.close();
    await pool?.end();
    await outside?.end();
    await database?.drop();
  });

  const notes = async (tag: string) =>
    (
      await outside.query<{ note: string }>('SELECT note FROM ledger WHERE tag = $1 ORDER BY id', [
        tag,
      ])
    ).rows.map((row) => row.note);
  const keyRow = async (key: string) =>
    (
      await outside.query<{ recovery_point: string; response_code: number | null }>(
        'SELECT recovery_point, response_code FROM idempotency_keys WHERE key = $1',
        [key],
      )
    ).rows[0];
  const post = (app: INestApplication, path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);

  it('TypeORM: a SERIALIZABLE phase held past three renewals commits once, and the request answers 201', async () => {
    const answer = await post(typeormApp, '/slow-phase', 'orm-phase', { tag: 'orm-phase' });
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ level: 'serializable' });
    expect(await notes('orm-phase')).toEqual(['held', 'finish']);
    const again = await post(typeormApp, '/slow-phase', 'orm-phase', { tag: 'orm-phase' });
    expect(again.text).toBe(answer.text);
    expect(await notes('orm-phase')).toEqual(['held', 'finish']);
  });

  it('TypeORM: an external call’s record held past the renewals commits once', async () => {
    const answer = await post(typeormApp, '/slow-record', 'orm-record', { tag: 'orm-record' });
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ recorded: true });
    expect(await notes('orm-record')).toEqual(['record']);
  });

  it('TypeORM: the last phase (finish) held past the renewals commits with the response', async () => {
    const answer = await post(typeormApp, '/slow-finish', 'orm-finish', { tag: 'orm-finish' });
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ level: 'serializable' });
    expect(await notes('orm-finish')).toEqual(['quick', 'finish']);
  });

  it('TypeORM: a retry sent while the phase holds runs nothing twice', async () => {
    const first = post(typeormApp, '/slow-phase', 'orm-retry', { tag: 'orm-retry' }).then((r) => r);
    // Past the first lease term (600 ms): only the heartbeat keeps the key from a takeover.
    await sleep(800);
    const retry = await post(typeormApp, '/slow-phase', 'orm-retry', { tag: 'orm-retry' });
    const answer = await first;
    expect(answer.status).toBe(201);
    // The retry does not wait on the key's row, which the renewals inside the phase hold: it
    // finds the key still running (or, late, its answer).
    expect([409, 201]).toContain(retry.status);
    if (retry.status === 201) expect(retry.text).toBe(answer.text);
    expect(await notes('orm-retry')).toEqual(['held', 'finish']);
  });

  it('TypeORM: a lease lost during the phase commits nothing of it, and stores nothing', async () => {
    const answer = await post(typeormApp, '/stolen', 'orm-stolen', {
      tag: 'orm-stolen',
      key: 'orm-stolen',
    });
    // 409 lease_lost: the phase's fenced recovery-point update finds the key moved on (or 503
    // when a renewal inside it, or the update, fails to serialize first).
    expect([409, 503]).toContain(answer.status);
    expect(await notes('orm-stolen')).toEqual([]);
    const row = await keyRow('orm-stolen');
    expect(row.response_code).toBeNull();
    expect(row.recovery_point).toBe('start');
  });

  it.each(['SERIALIZABLE', 'REPEATABLE READ'])(
    'pool seam: a phase whose transaction asks for %s, held past three renewals, commits once',
    async (level) => {
      const tag = `pool-${level.replace(' ', '-')}`;
      const answer = await post(poolApp, '/slow-phase', tag, { tag, level });
      expect(answer.status).toBe(201);
      expect(answer.body).toEqual({ level: level.toLowerCase() });
      expect(await notes(tag)).toEqual(['held', 'finish']);
    },
  );
});
