import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Kysely, PostgresDialect } from 'kysely';
import { type Pool } from 'pg';
import Cursor from 'pg-cursor';
import QueryStream from 'pg-query-stream';
import request from 'supertest';
import { DataSource } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  Idempotent,
  IdempotencyModule,
  IdempotentTransaction,
} from '../../lib/index.js';
import { ADAPTERS, bootstrapTestApp } from '../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';
import { createTestPool, endTestPool } from '../support/test-pool.js';

/**
 * The request's one connection, blocked (issue 27, items 5 and 7). On the pool seam every
 * statement of an idempotent request runs on one connection. A cursor open on it (Kysely's
 * `stream()`, pg-cursor, pg-query-stream) holds it until it ends, so a write sent while it is
 * open would wait for it forever, with the heartbeat keeping the key held: refused at once
 * instead, the request rolled back, answered with its own problem code. And work a request
 * awaits in `IdempotentTransaction.outside()` needs a second connection of the same pool while
 * the request holds one: a burst of such requests as large as the pool would hold every
 * connection and wait for one more, forever; that wait is bounded.
 */
let pool: Pool;

interface Items {
  items: { n: number };
  copies: { n: number; tag: string };
}

let db: Kysely<Items>;

interface TagBody {
  tag: string;
}

/** Opens once `count` callers arrived; stays open. The burst's requests all hold a connection. */
class Gate {
  private arrived = 0;
  private open!: () => void;
  readonly opened = new Promise<void>((resolve) => (this.open = resolve));
  constructor(private readonly count: number) {}
  arrive(): Promise<void> {
    if (++this.arrived >= this.count) this.open();
    return this.opened;
  }
}
let burst = new Gate(4);

@Controller()
class BlockedController {
  private copy(tag: string, n: number) {
    return db.insertInto('copies').values({ n, tag }).execute();
  }

  /** The case: Kysely's stream() with a write per streamed row. */
  @Post('kysely-stream-write')
  @Idempotent()
  async kyselyStreamWrite(@Body() body: TagBody) {
    for await (const row of db.selectFrom('items').select('n').orderBy('n').stream(2)) {
      await this.copy(body.tag, row.n);
    }
    return { tag: body.tag };
  }

  /** Control: the stream read to its end first, then the writes. */
  @Post('kysely-stream-then-write')
  @Idempotent()
  async kyselyStreamThenWrite(@Body() body: TagBody) {
    const rows: number[] = [];
    for await (const row of db.selectFrom('items').select('n').orderBy('n').stream(2)) {
      rows.push(row.n);
    }
    for (const n of rows) await this.copy(body.tag, n);
    return { tag: body.tag, rows };
  }

  /** pg-cursor on pool.connect()'s client, a write through the pool while it is open. */
  @Post('cursor-write')
  @Idempotent()
  async cursorWrite(@Body() body: TagBody) {
    const client = await pool.connect();
    try {
      const cursor = client.query(new Cursor<{ n: number }>('SELECT n FROM items ORDER BY n'));
      try {
        for (let rows = await cursor.read(2); rows.length > 0; rows = await cursor.read(2)) {
          for (const row of rows) {
            await pool.query('INSERT INTO copies (n, tag) VALUES ($1, $2)', [row.n, body.tag]);
          }
        }
      } finally {
        await cursor.close();
      }
    } finally {
      client.release();
    }
    return { tag: body.tag };
  }

  /** pg-cursor left open when the handler answers: its connection is the commit's. */
  @Post('cursor-left-open')
  @Idempotent()
  async cursorLeftOpen(@Body() body: TagBody) {
    await db.insertInto('copies').values({ n: 0, tag: body.tag }).execute();
    const client = await pool.connect();
    const cursor = client.query(new Cursor<{ n: number }>('SELECT n FROM items ORDER BY n'));
    const rows = await cursor.read(2);
    client.release();
    return { tag: body.tag, rows: rows.length };
  }

  /** The same, with the refusal caught and an answer given anyway. */
  @Post('cursor-write-swallowed')
  @Idempotent()
  async cursorWriteSwallowed(@Body() body: TagBody) {
    await this.cursorWrite(body).catch(() => undefined);
    return { tag: body.tag };
  }

  /** pg-query-stream on pool.connect()'s client, a write per row through Kysely. */
  @Post('query-stream-write')
  @Idempotent()
  async queryStreamWrite(@Body() body: TagBody) {
    const client = await pool.connect();
    try {
      const stream = client.query(
        new QueryStream('SELECT n FROM items ORDER BY n', [], { batchSize: 2, highWaterMark: 2 }),
      );
      for await (const row of stream as AsyncIterable<{ n: number }>) {
        await this.copy(body.tag, row.n);
      }
    } finally {
      client.release();
    }
    return { tag: body.tag };
  }

  /** Its write, then work awaited in outside(): a second connection of the same pool. */
  @Post('outside')
  @Idempotent()
  async outside(@Body() body: TagBody) {
    await this.copy(body.tag, 1);
    await burst.arrive();
    await IdempotentTransaction.outside(() => this.copy(body.tag, 2));
    return { tag: body.tag };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 1500 }),
    }),
  ],
  controllers: [BlockedController],
})
class BlockedAppModule {}

/** The same outside() route on TypeORM: its DataSource's pool of four. */
@Controller()
class TypeOrmOutsideController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private copy(tag: string, n: number) {
    return this.dataSource.query('INSERT INTO copies (n, tag) VALUES ($1, $2)', [n, tag]);
  }

  @Post('outside')
  @Idempotent()
  async outside(@Body() body: TagBody) {
    await this.copy(body.tag, 1);
    await burst.arrive();
    await IdempotentTransaction.outside(() => this.copy(body.tag, 2));
    return { tag: body.tag };
  }
}

let typeOrmUrl = '';

@Module({
  imports: [
    TypeOrmModule.forRootAsync({
      useFactory: () => ({
        type: 'postgres',
        url: typeOrmUrl,
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        extra: { max: 4 },
      }),
    }),
    IdempotencyModule.forRoot({ globalKeys: true, databaseTimeoutMs: 1500 }),
  ],
  controllers: [TypeOrmOutsideController],
})
class TypeOrmOutsideModule {}

const PROBLEM = /^application\/problem\+json/;

describe.each(ADAPTERS)('the request’s one connection, blocked (%s)', (adapter) => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase(`seam_blocked_${adapter}`);
    pool = createTestPool({ connectionString: database.url, max: 4 });
    await pool.query(readFileSync('migrations/schema.sql', 'utf8'));
    await pool.query(
      'CREATE TABLE items (n int PRIMARY KEY); INSERT INTO items SELECT generate_series(1, 5);' +
        'CREATE TABLE copies (id serial PRIMARY KEY, n int NOT NULL, tag text NOT NULL)',
    );
    db = new Kysely<Items>({ dialect: new PostgresDialect({ pool, cursor: Cursor }) });
    app = await bootstrapTestApp(BlockedAppModule, adapter);
  });
  afterAll(async () => {
    await app?.close();
    await endTestPool(pool);
    await database?.drop();
  });

  const copies = async (tag: string) =>
    Number(
      (await pool.query<{ n: string }>('SELECT count(*) AS n FROM copies WHERE tag = $1', [tag]))
        .rows[0].n,
    );
  /** A request that must be answered within `ms` (supertest fails it otherwise). */
  const post = (path: string, key: string, body: object, ms = 6000) =>
    request(app.getHttpServer())
      .post(path)
      .set('Idempotency-Key', key)
      .timeout({ response: ms })
      .send(body);

  describe('a cursor open on the request’s connection', () => {
    it.each([
      ['Kysely’s stream() with a write per row', '/kysely-stream-write'],
      ['pg-cursor on a client of the pool, a write through pool.query()', '/cursor-write'],
      ['pg-query-stream on a client of the pool, a write through Kysely', '/query-stream-write'],
      ['pg-cursor, the refusal caught and an answer given anyway', '/cursor-write-swallowed'],
      ['pg-cursor left open when the handler answers', '/cursor-left-open'],
    ])(
      '%s: answered 500 cursor_open at once, rolled back, the key not held',
      async (_name, path) => {
        const tag = `${path.slice(1)}-${adapter}`;
        const began = Date.now();
        const first = await post(path, tag, { tag });
        expect(Date.now() - began).toBeLessThan(4000);
        expect(first.status).toBe(500);
        expect(first.headers['content-type']).toMatch(PROBLEM);
        expect(first.headers['retry-after']).toBeUndefined();
        expect(first.body).toMatchObject({ code: 'cursor_open', status: 500 });
        expect(first.body.detail).toMatch(/cursor/);
        expect(await copies(tag)).toBe(0);
        // Nothing stored and the lease given back: the retry runs it again (and meets the same
        // refusal), never a 409 behind a worker that holds the key.
        const retry = await post(path, tag, { tag });
        expect(retry.status).toBe(500);
        expect(retry.body.code).toBe('cursor_open');
        expect(await copies(tag)).toBe(0);
      },
    );

    it('a stream read to its end before the writes commits them with the answer', async () => {
      const tag = `stream-then-write-${adapter}`;
      const first = await post('/kysely-stream-then-write', tag, { tag });
      expect(first.status).toBe(201);
      expect(first.body.rows).toEqual([1, 2, 3, 4, 5]);
      expect(await copies(tag)).toBe(5);
      const replay = await post('/kysely-stream-then-write', tag, { tag });
      expect(replay.status).toBe(201);
      expect(replay.headers['idempotent-replayed']).toBe('true');
      expect(await copies(tag)).toBe(5);
    });
  });

  it(
    'outside() work awaited by a burst as large as the pool: answered within bounds, the pool recovers',
    () =>
      outsideBurst(
        () => app,
        () => pool,
        adapter,
        copies,
      ),
    60_000,
  );
});

/**
 * Six requests on a pool of four, each holding its request's connection and awaiting work in
 * outside() (the gate lets them on once four hold one): every one answered within bounds, 201
 * or 503 `store_unavailable`; then the burst's keys and a new one answer 201, each with its
 * two writes once, and nobody waits on the pool.
 */
async function outsideBurst(
  app: () => INestApplication,
  pool: () => { waitingCount: number },
  label: string,
  copies: (tag: string) => Promise<number>,
): Promise<void> {
  const post = (key: string) =>
    request(app().getHttpServer())
      .post('/outside')
      .set('Idempotency-Key', key)
      .timeout({ response: 15_000 })
      .send({ tag: key });
  burst = new Gate(4);
  const keys = Array.from({ length: 6 }, (_, i) => `outside-${label}-${i}`);
  const began = Date.now();
  const answers = await Promise.all(keys.map((key) => post(key)));
  expect(Date.now() - began).toBeLessThan(12_000);
  for (const answer of answers) {
    expect([201, 503]).toContain(answer.status);
    if (answer.status === 503) {
      expect(answer.body.code).toBe('store_unavailable');
      expect(answer.headers['retry-after']).toBe('1');
    }
  }
  expect(answers.some((answer) => answer.status === 503)).toBe(true);
  // After the burst: a new key, and each key of the burst again, answer 201 with both
  // writes, once each.
  const fresh = await post(`outside-${label}-new`);
  expect(fresh.status).toBe(201);
  for (const key of keys) {
    const again = await post(key);
    expect(again.status).toBe(201);
    expect(await copies(key)).toBe(2); // its write and the outside() work, once each
  }
  expect(pool().waitingCount).toBe(0);
}

describe.each(ADAPTERS)('outside() on TypeORM’s pool (%s)', (adapter) => {
  let database: TestDatabase;
  let app: INestApplication;
  let dataSource: DataSource;

  beforeAll(async () => {
    database = await createTestDatabase(`seam_blocked_typeorm_${adapter}`);
    typeOrmUrl = database.url;
    app = await bootstrapTestApp(TypeOrmOutsideModule, adapter);
    dataSource = app.get(DataSource);
    await dataSource.query(
      'CREATE TABLE copies (id serial PRIMARY KEY, n int NOT NULL, tag text NOT NULL)',
    );
  });
  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  const copies = async (tag: string) =>
    Number(
      (
        await dataSource.query<{ n: string }[]>('SELECT count(*) AS n FROM copies WHERE tag = $1', [
          tag,
        ])
      )[0].n,
    );

  it(
    'outside() work awaited by a burst as large as the pool: answered within bounds, the pool recovers',
    () =>
      outsideBurst(
        () => app,
        () => (dataSource.driver as unknown as { master: { waitingCount: number } }).master,
        `typeorm-${adapter}`,
        copies,
      ),
    60_000,
  );
});
