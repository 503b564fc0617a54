import {
  Body,
  ConflictException,
  Controller,
  type INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { type Pool } from 'pg';
import request from 'supertest';
import { type DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, Idempotent, IdempotencyModule } from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { createTestPool, endTestPool } from './support/test-pool.js';

/**
 * The claim path next to a request transaction above READ COMMITTED. Such a transaction
 * renews its key's lease inside itself (a renewal committed apart after its snapshot would
 * fail its stored answer), so it holds the key's row lock until it commits. A claim or a
 * takeover that waited on that lock held the retry until the handler ended, and, since the
 * claims of a process go one batch at a time, every other new key of the process behind it.
 * And the level a database or role gives its sessions by default (`ALTER DATABASE ... SET
 * default_transaction_isolation`) is such a level too, as if the route had asked for it.
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

interface Tagged {
  tag: string;
  slot?: string;
}

/** Handlers held until the test opens their gate, by tag. */
const gates = new Map<string, { open: Promise<void>; release: () => void }>();
function gate(tag: string): { open: Promise<void>; release: () => void } {
  let entry = gates.get(tag);
  if (!entry) {
    let release!: () => void;
    const open = new Promise<void>((resolve) => (release = resolve));
    entry = { open, release };
    gates.set(tag, entry);
  }
  return entry;
}

/** Two bookings both read before either writes: a real write-skew race, every time. */
const barriers = new Map<string, { arrived: number; open: Promise<void>; release: () => void }>();
function barrier(name: string): Promise<void> {
  let entry = barriers.get(name);
  if (!entry) {
    let release!: () => void;
    const open = new Promise<void>((resolve) => (release = resolve));
    entry = { arrived: 0, open, release };
    barriers.set(name, entry);
    setTimeout(release, 5000).unref();
  }
  if (++entry.arrived >= 2) entry.release();
  return entry.open;
}

/** What a handler runs its statements with: the app's pool, or TypeORM's DataSource. */
type Run = (text: string, values: unknown[]) => Promise<{ n?: number; level?: string }[]>;

/** The routes, the same on both data layers. */
class Cells {
  constructor(private readonly run: Run) {}

  private insert(tag: string) {
    return this.run('INSERT INTO ledger (tag) VALUES ($1)', [tag]);
  }

  private async level(): Promise<string> {
    const [row] = await this.run("SELECT current_setting('transaction_isolation') AS level", []);
    return row.level!;
  }

  /** Above READ COMMITTED, held until the test opens its gate: past several renewals. */
  async held(body: Tagged) {
    await this.insert(body.tag);
    await gate(body.tag).open;
    return { tag: body.tag, level: await this.level() };
  }

  async plain(body: Tagged) {
    await this.insert(body.tag);
    return { tag: body.tag };
  }

  /** At the database's default level, held past two renewals (every leaseMs / 3). */
  async slow(body: Tagged) {
    await this.insert(body.tag);
    await sleep(1000);
    return { tag: body.tag, level: await this.level() };
  }

  /** Read, then insert: two bookings of one slot, only one may commit. */
  async book(body: Tagged) {
    const [{ n }] = await this.run('SELECT count(*)::int AS n FROM bookings WHERE slot = $1', [
      body.slot,
    ]);
    await barrier(`${body.slot}`);
    if (n! > 0) throw new ConflictException('slot taken');
    await this.run('INSERT INTO bookings (slot, who) VALUES ($1, $2)', [body.slot, body.tag]);
    return { slot: body.slot, who: body.tag };
  }
}

let pool: Pool;
let databaseUrl = '';

@Controller()
class PoolController {
  private readonly cells = new Cells(
    async (text, values) => (await pool.query<{ n?: number; level?: string }>(text, values)).rows,
  );

  @Post('held')
  @Idempotent({ isolationLevel: 'SERIALIZABLE', leaseMs: 3000 })
  held(@Body() body: Tagged) {
    return this.cells.held(body);
  }

  @Post('plain')
  @Idempotent()
  plain(@Body() body: Tagged) {
    return this.cells.plain(body);
  }

  @Post('slow')
  @Idempotent({ leaseMs: 600 })
  slow(@Body() body: Tagged) {
    return this.cells.slow(body);
  }

  @Post('book')
  @Idempotent()
  book(@Body() body: Tagged) {
    return this.cells.book(body);
  }

  @Post('book-serializable')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  bookSerializable(@Body() body: Tagged) {
    return this.cells.book(body);
  }
}

@Controller()
class TypeOrmController {
  private readonly cells: Cells;

  constructor(@InjectDataSource() dataSource: DataSource) {
    this.cells = new Cells((text, values) => dataSource.query(text, values));
  }

  @Post('held')
  @Idempotent({ isolationLevel: 'SERIALIZABLE', leaseMs: 3000 })
  held(@Body() body: Tagged) {
    return this.cells.held(body);
  }

  @Post('plain')
  @Idempotent()
  plain(@Body() body: Tagged) {
    return this.cells.plain(body);
  }

  @Post('slow')
  @Idempotent({ leaseMs: 600 })
  slow(@Body() body: Tagged) {
    return this.cells.slow(body);
  }

  @Post('book')
  @Idempotent()
  book(@Body() body: Tagged) {
    return this.cells.book(body);
  }

  @Post('book-serializable')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  bookSerializable(@Body() body: Tagged) {
    return this.cells.book(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PoolController],
})
class PoolAppModule {}

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      useFactory: () => ({
        type: 'postgres' as const,
        url: databaseUrl,
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
      }),
    }),
    IdempotencyModule.forRoot({ globalKeys: true }),
  ],
  controllers: [TypeOrmController],
})
class TypeOrmAppModule {}

const LAYERS = ['pool', 'typeorm'] as const;
type Layer = (typeof LAYERS)[number];

const DDL = `CREATE TABLE ledger (id serial PRIMARY KEY, tag text NOT NULL);
  CREATE TABLE bookings (id serial PRIMARY KEY, slot text NOT NULL, who text NOT NULL)`;

/** An app of `layer` on the database at `url`; its pool (the pool seam's) when it has one. */
async function startApp(layer: Layer, url: string): Promise<INestApplication> {
  databaseUrl = url;
  if (layer === 'typeorm') return bootstrapTestApp(TypeOrmAppModule);
  pool = createTestPool({ connectionString: url, max: 6 });
  return bootstrapTestApp(PoolAppModule);
}

describe.each(LAYERS)('claims next to a transaction above READ COMMITTED (%s)', (layer) => {
  let database: TestDatabase;
  let app: INestApplication;
  let appPool: Pool | undefined;
  /** The test's own connections. */
  let outside: Pool;

  beforeAll(async () => {
    database = await createTestDatabase(`claim_isolation_${layer}`);
    outside = createTestPool({ connectionString: database.url, max: 2 });
    if (layer === 'pool') {
      await outside.query((await import('node:fs')).readFileSync('migrations/schema.sql', 'utf8'));
    }
    await outside.query(DDL);
    app = await startApp(layer, database.url);
    appPool = layer === 'pool' ? pool : undefined;
  });
  afterAll(async () => {
    await app?.close();
    await endTestPool(appPool);
    await endTestPool(outside);
    await database?.drop();
  });

  const post = (path: string, key: string, body: object) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const timed = async (path: string, key: string, body: object) => {
    const started = Date.now();
    const answer = await post(path, key, body);
    return { answer, ms: Date.now() - started };
  };

  /** Once a renewal inside the request's transaction holds the key's row. */
  async function rowLocked(key: string): Promise<void> {
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(25)) {
      try {
        await outside.query('SELECT 1 FROM idempotency_keys WHERE key = $1 FOR UPDATE NOWAIT', [
          key,
        ]);
      } catch (error) {
        if ((error as { code?: string }).code === '55P03') return;
        throw error;
      }
    }
    throw new Error(`the row of ${key} was never locked`);
  }

  /** Once the lease as committed has run out (the renewals inside are not committed yet). */
  async function committedLeaseOver(key: string): Promise<void> {
    for (const deadline = Date.now() + 10_000; Date.now() < deadline; await sleep(50)) {
      const { rows } = await outside.query<{ over: boolean }>(
        'SELECT locked_until < clock_timestamp() AS over FROM idempotency_keys WHERE key = $1',
        [key],
      );
      if (rows[0]?.over) return;
    }
    throw new Error(`the lease of ${key} never ran out`);
  }

  function expectInProgress(answer: request.Response, ms: number) {
    expect(answer.status).toBe(409);
    expect(answer.body).toMatchObject({ code: 'key_in_progress', status: 409 });
    expect(Number(answer.headers['retry-after'])).toBeGreaterThanOrEqual(1);
    // Promptly: not after the held transaction, nor after the database deadline (5 s).
    expect(ms).toBeLessThan(1500);
  }

  it('answers a retry of a held key 409 at once, and other keys 201 at once, while the renewals inside hold its row', async () => {
    const key = `held-${layer}`;
    const first = post('/held', key, { tag: key }).then((answer) => answer);
    try {
      await heldWhileOthersGo(key);
    } finally {
      gate(key).release();
    }
    const answer = await first;
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ tag: key, level: 'serializable' });
    const replay = await post('/held', key, { tag: key });
    expect(replay.text).toBe(answer.text);
    const { rows } = await outside.query('SELECT 1 FROM ledger WHERE tag = $1', [key]);
    expect(rows).toHaveLength(1);
  });

  async function heldWhileOthersGo(key: string): Promise<void> {
    await rowLocked(key);

    // The lease as committed is still live: the claim finds the key taken.
    const [retry, other] = await Promise.all([
      timed('/held', key, { tag: key }),
      timed('/plain', `other-${layer}-1`, { tag: `other-${layer}-1` }),
    ]);
    expectInProgress(retry.answer, retry.ms);
    expect(other.answer.status).toBe(201);
    expect(other.ms).toBeLessThan(1500);

    // Past the lease as committed (the renewals inside are not): the retry tries a takeover,
    // which must not wait on the row either. The holder is alive: 409.
    await committedLeaseOver(key);
    const [takeover, another] = await Promise.all([
      timed('/held', key, { tag: key }),
      timed('/plain', `other-${layer}-2`, { tag: `other-${layer}-2` }),
    ]);
    expectInProgress(takeover.answer, takeover.ms);
    expect(another.answer.status).toBe(201);
    expect(another.ms).toBeLessThan(1500);
  }
});

describe.each(LAYERS)(
  'a database whose default_transaction_isolation is serializable (%s)',
  (layer) => {
    let database: TestDatabase;
    let app: INestApplication;
    let appPool: Pool | undefined;
    let outside: Pool;

    beforeAll(async () => {
      database = await createTestDatabase(`claim_default_level_${layer}`);
      const name = new URL(database.url).pathname.slice(1);
      outside = createTestPool({ connectionString: database.url, max: 2 });
      await outside.query(
        `ALTER DATABASE "${name}" SET default_transaction_isolation = 'serializable'`,
      );
      if (layer === 'pool') {
        await outside.query(
          (await import('node:fs')).readFileSync('migrations/schema.sql', 'utf8'),
        );
      }
      await outside.query(DDL);
      app = await startApp(layer, database.url);
      appPool = layer === 'pool' ? pool : undefined;
    });
    afterAll(async () => {
      await app?.close();
      await endTestPool(appPool);
      await endTestPool(outside);
      await database?.drop();
    });

    const post = (path: string, key: string, body: object) =>
      request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);

    it('keeps a request held past its heartbeats: 201 at the first try, one row', async () => {
      const key = `slow-${layer}`;
      const answer = await post('/slow', key, { tag: key });
      expect(answer.status).toBe(201);
      expect(answer.body).toEqual({ tag: key, level: 'serializable' });
      const { rows } = await outside.query('SELECT 1 FROM ledger WHERE tag = $1', [key]);
      expect(rows).toHaveLength(1);
    });

    it.each([
      ['at the database’s default', '/book'],
      ['with isolationLevel SERIALIZABLE on the route (the control)', '/book-serializable'],
    ])(
      'books a slot once when two requests read, then insert, %s: one 201, one 503',
      async (_name, path) => {
        const slot = `slot-${layer}-${path}`;
        const bodies = [
          { tag: `${slot}-a`, slot },
          { tag: `${slot}-b`, slot },
        ];
        const answers = await Promise.all(bodies.map((body) => post(path, body.tag, body)));
        expect(answers.map((answer) => answer.status).sort()).toEqual([201, 503]);
        const loser = answers.findIndex((answer) => answer.status === 503);
        expect(answers[loser].body).toMatchObject({ code: 'database_transient', status: 503 });
        expect(answers[loser].headers['retry-after']).toBe('1');
        const retry = await post(path, bodies[loser].tag, bodies[loser]);
        expect(retry.status).toBe(409);
        expect(retry.body).toMatchObject({ message: 'slot taken' });
        const { rows } = await outside.query('SELECT who FROM bookings WHERE slot = $1', [slot]);
        expect(rows).toHaveLength(1);
      },
    );
  },
);
