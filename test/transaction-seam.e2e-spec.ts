import { type INestApplication } from '@nestjs/common';
import { Client } from 'pg';
import request from 'supertest';
import { ADAPTERS } from './support/bootstrap.js';
import { startWorker, type WorkerProcess } from './support/worker-process.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import {
  createSeamApp,
  laterOutcomes,
  RAW_CONTROL,
  SEAM_DDL,
  type SeamBody,
  sleep,
} from './support/seam-app.js';

/**
 * The seam between the request's transaction and what a handler's code does with the
 * DataSource: nested transactions, query runners driven by hand, transaction control sent as
 * SQL, isolation levels, a second DataSource, work left running after the answer. Each cell
 * asserts exactly once: its effects counted in the database and its answer replayed byte for
 * byte, or a refusal with its exact message and nothing committed.
 */
const PROBLEM = /^application\/problem\+json/;
const ABORTED = {
  type: 'urn:idempotency:transaction_aborted',
  title: 'Transaction aborted',
  status: 500,
  detail:
    "A statement of this request's transaction failed and the handler went on; nothing was " +
    'committed or stored. Retrying runs the request again.',
  code: 'transaction_aborted',
};

describe.each(ADAPTERS)('the transaction seam on %s', (adapter) => {
  let database: TestDatabase;
  let db: Client;
  let app: INestApplication;
  let n = 0;
  const tag = (label: string) => `${label}-${adapter}-${++n}-${Date.now()}`;

  beforeAll(async () => {
    database = await createTestDatabase(`seam_${adapter}`);
    db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(SEAM_DDL);
    app = await createSeamApp({ databaseUrl: database.url, adapter });
  });
  afterAll(async () => {
    await app?.close();
    await db?.end();
    await database?.drop();
  });

  const post = (path: string, key: string, body: SeamBody) =>
    request(app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const count = async (table: 'orders' | 'audit', tagged: string) =>
    Number(
      (await db.query<{ n: string }>(`SELECT count(*) AS n FROM ${table} WHERE tag = $1`, [tagged]))
        .rows[0].n,
    );
  const keyRow = async (key: string) =>
    (
      await db.query<{ state: string; released: boolean }>(
        `SELECT state, locked_until IS NULL AS released FROM idempotency_keys WHERE key = $1`,
        [key],
      )
    ).rows[0];
  /** The first answer, then its retry: replayed byte for byte. */
  const once = async (cell: string, body: SeamBody) => {
    const first = await post(`/seam/${cell}`, body.tag, body);
    const again = await post(`/seam/${cell}`, body.tag, body);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.status).toBe(first.status);
    expect(again.text).toBe(first.text);
    return first;
  };
  /** A refused request: 500 transaction_aborted each time, nothing committed or stored. */
  const aborted = async (cell: string, body: SeamBody) => {
    for (let attempt = 0; attempt < 2; attempt++) {
      const res = await post(`/seam/${cell}`, body.tag, body);
      expect(res.status).toBe(500);
      expect(res.headers['content-type']).toMatch(PROBLEM);
      expect(res.headers['idempotent-replayed']).toBeUndefined();
      expect(res.body).toEqual(ABORTED);
      expect(await count('orders', body.tag)).toBe(0);
      expect(await count('audit', body.tag)).toBe(0);
      expect(await keyRow(body.tag)).toEqual({ state: 'started', released: true });
    }
  };

  describe('the request’s transaction is never ended by the handler’s code', () => {
    it('a nested transaction after a swallowed error (its SAVEPOINT fails, 25P02): 500 transaction_aborted, nothing committed or stored', async () => {
      await aborted('savepoint-fails', { tag: tag('savepoint-fails') });
    });

    it.each(Object.entries(RAW_CONTROL))(
      'raw %s on the request’s connection is refused, and the request answers 500 transaction_aborted',
      async (name) => {
        await aborted(`raw-${name}`, { tag: tag(`raw-${name}`) });
      },
    );

    const refusal = (statement: string) => ({
      error: 'TransactionControlRefusedError',
      message:
        `${statement} refused: the idempotent request's transaction commits with its stored ` +
        'response, and code in it must not end it. Use a nested transaction ' +
        '(manager.transaction() or a query runner’s startTransaction() before its commit or ' +
        'rollback on TypeORM; $transaction() on Prisma; transaction() on Drizzle or Kysely), ' +
        'which is a savepoint, or run the work outside the request with ' +
        'IdempotentTransaction.outside().',
    });

    it.each([
      ['raw COMMIT', 'thrown-raw-commit', 'COMMIT'],
      [
        'rollbackTransaction() with no startTransaction()',
        'runner-rollback-unstarted-thrown',
        'rollbackTransaction() with no startTransaction()',
      ],
    ])(
      '%s, not caught: the refusal is the handler’s error, stored with its message, nothing committed',
      async (_name, cell, statement) => {
        const body = { tag: tag(cell) };
        const first = await once(cell, body);
        expect(first.status).toBe(500);
        expect(first.body).toEqual(refusal(statement));
        expect(await count('orders', body.tag)).toBe(0);
      },
    );

    it('a query runner’s commitTransaction() with no startTransaction() is refused the same way', async () => {
      await aborted('runner-commit-unstarted', { tag: tag('unstarted') });
    });
  });

  describe('isolation levels asked for inside the request', () => {
    it.each([
      ['read-uncommitted', 'read uncommitted'],
      ['read-committed', 'read committed'],
      ['repeatable-read', 'repeatable read'],
      ['serializable', 'serializable'],
    ])(
      'manager.transaction(%s) as the first work: the request’s transaction begins at it',
      async (level, reported) => {
        const body = { tag: tag(`tx-${level}`) };
        const first = await once(`tx-${level}`, body);
        expect(first.status).toBe(201);
        expect(first.body).toEqual({ cell: `tx-${level}`, level: reported });
        expect(await count('orders', body.tag)).toBe(1);
      },
    );

    it('a stronger level asked for after the transaction began weaker is refused, saying to set it on the route', async () => {
      const body = { tag: tag('stronger') };
      const first = await once('stronger-after-write', body);
      expect(first.status).toBe(500);
      expect(first.body).toEqual({
        error: 'IsolationLevelRefusedError',
        message:
          "isolation level refused: the request's transaction already began at READ COMMITTED, " +
          "and PostgreSQL cannot raise a transaction's isolation level once it began. Set it on " +
          "the route, @Idempotent({ isolationLevel: 'SERIALIZABLE' }), or make this transaction " +
          "the handler's first database work",
      });
      expect(await count('orders', body.tag)).toBe(0);
    });

    it('nested SERIALIZABLE in SERIALIZABLE, then READ COMMITTED in it: savepoints of the SERIALIZABLE transaction', async () => {
      const body = { tag: tag('nested-levels') };
      const first = await once('nested-levels', body);
      expect(first.status).toBe(201);
      expect(first.body).toEqual({ cell: 'nested-levels', orders: 3 });
      expect(await count('orders', body.tag)).toBe(3);
    });

    // Without the library TypeORM sends no level for a transaction nested in one of its
    // code's own (a SAVEPOINT): it commits at REPEATABLE READ. It was refused here until
    // adversary 85 (a 500 where TypeORM answers 201); the refusal stays for the code's
    // outermost transaction asking after the request's began ('stronger-after-write').
    it('SERIALIZABLE nested in a REPEATABLE READ first transaction is a savepoint of it, as in TypeORM', async () => {
      const body = { tag: tag('nested-stronger') };
      const first = await once('nested-stronger', body);
      expect(first.status).toBe(201);
      expect(first.body).toEqual({ cell: 'nested-stronger', orders: 2 });
      expect(await count('orders', body.tag)).toBe(2);
    });

    it('a write-skew race under SERIALIZABLE (two keys, one slot): one 201, one 503, whose retry is refused by the app’s rule', async () => {
      const slot = tag('slot');
      const bodies = [
        { tag: tag('book-a'), slot },
        { tag: tag('book-b'), slot },
      ];
      const answers = await Promise.all(bodies.map((body) => post('/seam/book', body.tag, body)));
      expect(answers.map((res) => res.status).sort()).toEqual([201, 503]);
      const loser = answers.findIndex((res) => res.status === 503);
      expect(answers[loser].body).toMatchObject({ code: 'database_transient', status: 503 });
      expect(answers[loser].headers['retry-after']).toBe('1');
      const bookings = async () =>
        Number(
          (
            await db.query<{ n: string }>('SELECT count(*) AS n FROM bookings WHERE slot = $1', [
              slot,
            ])
          ).rows[0].n,
        );
      expect(await bookings()).toBe(1);
      const retry = await post('/seam/book', bodies[loser].tag, bodies[loser]);
      expect(retry.status).toBe(409);
      expect(retry.body).toMatchObject({ message: 'slot taken', statusCode: 409 });
      expect(await bookings()).toBe(1);
    });

    it.each([
      ['a weaker nested transaction', 'tx-repeatable-read', { level: 'serializable' }, 1],
      ['a nested one at the same level', 'tx-serializable', { level: 'serializable' }, 1],
      [
        'a stronger one after a write (the route is already there)',
        'stronger-after-write',
        { orders: 2 },
        2,
      ],
    ])(
      'a route with isolationLevel SERIALIZABLE begins at it; %s joins it',
      async (_name, cell, answer, orders) => {
        const body = { tag: tag(`route-${cell}`) };
        const first = await post(`/serializable-route/${cell}`, body.tag, body);
        expect(first.status).toBe(201);
        expect(first.body).toEqual({ cell, ...answer });
        const again = await post(`/serializable-route/${cell}`, body.tag, body);
        expect(again.text).toBe(first.text);
        expect(await count('orders', body.tag)).toBe(orders);
      },
    );

    it('a route with isolationLevel SERIALIZABLE: the write-skew race, its read a plain repository read, gives one 201 and one 503', async () => {
      const slot = tag('slot-route');
      const bodies = [
        { tag: tag('route-a'), slot },
        { tag: tag('route-b'), slot },
      ];
      const answers = await Promise.all(
        bodies.map((body) => post('/serializable-route/book', body.tag, body)),
      );
      expect(answers.map((res) => res.status).sort()).toEqual([201, 503]);
      const loser = answers.findIndex((res) => res.status === 503);
      expect(answers[loser].body).toMatchObject({ code: 'database_transient', status: 503 });
      const retry = await post('/serializable-route/book', bodies[loser].tag, bodies[loser]);
      expect(retry.status).toBe(409);
      const { rows } = await db.query<{ n: string }>(
        'SELECT count(*) AS n FROM bookings WHERE slot = $1',
        [slot],
      );
      expect(Number(rows[0].n)).toBe(1);
    });

    it('the same race without an isolation level books the slot twice (the race is real)', async () => {
      const slot = tag('slot-plain');
      const bodies = [
        { tag: tag('plain-a'), slot },
        { tag: tag('plain-b'), slot },
      ];
      const answers = await Promise.all(bodies.map((body) => post('/book-plain', body.tag, body)));
      expect(answers.map((res) => res.status)).toEqual([201, 201]);
      const { rows } = await db.query<{ n: string }>(
        'SELECT count(*) AS n FROM bookings WHERE slot = $1',
        [slot],
      );
      expect(Number(rows[0].n)).toBe(2);
    });
  });

  describe('work left running after the answer', () => {
    it.each([-1, 0, 1, 2, 5])(
      'a write started %i ms after the handler returned (-1: before, not awaited) runs, with the answer or on its own once it committed (20 requests)',
      async (delayMs) => {
        const bodies = Array.from({ length: 20 }, (_, i) => ({
          tag: tag(`later-${delayMs}-${i}`),
          delayMs,
        }));
        const answers = await Promise.all(
          bodies.map((body) => post('/seam/later', body.tag, body)),
        );
        expect(answers.map((res) => res.status)).toEqual(Array(20).fill(201));
        const outcomes = await settled(bodies.map((body) => `${body.tag}-later`));
        expect(outcomes).toEqual(Array(20).fill('written'));
        for (const body of bodies) {
          expect(await count('orders', body.tag)).toBe(1);
          expect(await count('orders', `${body.tag}-later`)).toBe(1);
        }
      },
    );

    it.each([-1, 0, 2])(
      'a write on a manager the handler held, started %i ms after it returned (-1: before, not awaited), runs too',
      async (delayMs) => {
        const bodies = Array.from({ length: 10 }, (_, i) => ({
          tag: tag(`held-${delayMs}-${i}`),
          delayMs,
        }));
        const answers = await Promise.all(
          bodies.map((body) => post('/seam/later-manager', body.tag, body)),
        );
        expect(answers.map((res) => res.status)).toEqual(Array(10).fill(201));
        const outcomes = await settled(bodies.map((body) => `${body.tag}-later`));
        expect(outcomes).toEqual(Array(10).fill('written'));
        for (const body of bodies) expect(await count('orders', `${body.tag}-later`)).toBe(1);
      },
    );

    it('after a rollback, such a write is refused (TransactionEndedError) and commits nothing', async () => {
      const bodies = Array.from({ length: 10 }, (_, i) => ({
        tag: tag(`rb-${i}`),
        delayMs: i % 3,
      }));
      const answers = await Promise.all(
        bodies.map((body) => post('/seam/later-rolled-back', body.tag, body)),
      );
      expect(answers.map((res) => res.status)).toEqual(Array(10).fill(503));
      const outcomes = await settled(bodies.map((body) => `${body.tag}-later`));
      expect(outcomes).toEqual(Array(10).fill('TransactionEndedError'));
      for (const body of bodies) {
        expect(await count('orders', body.tag)).toBe(0);
        expect(await count('orders', `${body.tag}-later`)).toBe(0);
      }
    });
  });

  describe('a statement that is not provably one plain read opens the transaction', () => {
    it.each([
      ['a SELECT followed by a DELETE in one text', 'forget-multi'],
      ['a SELECT calling a function that writes', 'forget-function'],
    ])('%s rolls back with the request', async (_name, cell) => {
      const body = { tag: tag(cell) };
      await db.query(`INSERT INTO orders (tag, name) VALUES ($1, 'seed')`, [`${body.tag}-seed`]);
      const res = await post(`/seam/${cell}`, body.tag, body);
      expect(res.status).toBe(503);
      expect(res.body).toMatchObject({ code: 'retry_later' });
      expect(await count('orders', `${body.tag}-seed`)).toBe(1);
    });
  });

  describe('the seam matrix', () => {
    it.each<[string, number, object, { orders: number; audit?: number }]>([
      ['plain', 201, { order: 'A' }, { orders: 1 }],
      ['nested', 201, { orders: 2 }, { orders: 2 }],
      ['twice-nested', 201, { orders: 3 }, { orders: 3 }],
      ['inner-fails', 201, { orders: 2 }, { orders: 2 }],
      ['runner-commit', 201, { orders: 2 }, { orders: 2 }],
      ['runner-rollback', 201, { orders: 1 }, { orders: 1 }],
      ['runner-client-released', 201, { orders: 2 }, { orders: 2 }],
      ['second-datasource', 201, { orders: 1 }, { orders: 1, audit: 1 }],
    ])(
      '%s: %i, effects exactly once, replayed byte for byte',
      async (cell, status, answer, effects) => {
        const body = { tag: tag(cell) };
        const first = await once(cell, body);
        expect(first.status).toBe(status);
        expect(first.body).toEqual({ cell, ...answer });
        expect(await count('orders', body.tag)).toBe(effects.orders);
        expect(await count('audit', body.tag)).toBe(effects.audit ?? 0);
      },
    );
  });

  it('a second DataSource is not joined: its write commits apart, and a rolled-back request’s retry writes it again', async () => {
    const body = { tag: tag('second-rb') };
    const first = await post('/seam/second-datasource-rolled-back', body.tag, body);
    expect(first.status).toBe(503);
    expect(first.body).toMatchObject({ code: 'retry_later' });
    expect(await count('orders', body.tag)).toBe(0);
    expect(await count('audit', body.tag)).toBe(1);
    const retry = await once('second-datasource-rolled-back', body);
    expect(retry.status).toBe(201);
    expect(await count('orders', body.tag)).toBe(1);
    expect(await count('audit', body.tag)).toBe(2);
  });

  describe('@nestjs-cls/transactional', () => {
    let worker: WorkerProcess;
    beforeAll(async () => {
      worker = await startWorker('test/support/seam-cls-worker.js', {
        DATABASE_URL: database.url,
        ADAPTER: adapter,
      });
    });
    afterAll(() => worker?.kill());
    const send = (path: string, key: string, body: SeamBody) =>
      request(worker.url).post(path).set('Idempotency-Key', key).send(body);
    const INTERNAL = { statusCode: 500, message: 'Internal server error' };

    it.each<[string, 'alone' | 'in-outer', number, number]>([
      ['required', 'alone', 201, 1],
      ['requires-new', 'alone', 201, 1],
      ['nested', 'alone', 201, 1],
      ['supports', 'alone', 201, 1],
      ['mandatory', 'alone', 500, 0],
      ['not-supported', 'alone', 201, 1],
      ['never', 'alone', 201, 1],
      ['required', 'in-outer', 201, 2],
      ['requires-new', 'in-outer', 201, 2],
      ['nested', 'in-outer', 201, 2],
      ['supports', 'in-outer', 201, 2],
      ['mandatory', 'in-outer', 201, 2],
      ['not-supported', 'in-outer', 201, 2],
      ['never', 'in-outer', 500, 0],
    ])(
      'Propagation %s, %s: %i, %i orders, replayed',
      async (propagation, where, status, orders) => {
        const body = { tag: tag(`cls-${propagation}-${where}`) };
        const path = `/cls/${propagation}/${where}`;
        const first = await send(path, body.tag, body);
        expect(first.status).toBe(status);
        expect(first.body).toEqual(status === 201 ? { propagation, where } : INTERNAL);
        const again = await send(path, body.tag, body);
        expect(again.headers['idempotent-replayed']).toBe('true');
        expect(again.text).toBe(first.text);
        expect(await count('orders', body.tag)).toBe(orders);
      },
    );

    it('@Transactional({ isolationLevel: SERIALIZABLE }) as the first work: the request’s transaction begins at it', async () => {
      const body = { tag: tag('cls-serializable') };
      const first = await send('/cls-isolation/first', body.tag, body);
      expect(first.status).toBe(201);
      expect(first.body).toEqual({ level: 'serializable' });
      expect(await count('orders', body.tag)).toBe(1);
    });

    it('@Transactional(RequiresNew, { isolationLevel: SERIALIZABLE }) after a write is refused, saying to set it on the route', async () => {
      const body = { tag: tag('cls-after-write') };
      const first = await send('/cls-isolation/after-write', body.tag, body);
      expect(first.status).toBe(500);
      expect(first.body).toEqual({
        error: 'IsolationLevelRefusedError',
        message: expect.stringContaining(
          "already began at READ COMMITTED, and PostgreSQL cannot raise a transaction's " +
            "isolation level once it began. Set it on the route, @Idempotent({ isolationLevel: 'SERIALIZABLE' })",
        ),
      });
      const again = await send('/cls-isolation/after-write', body.tag, body);
      expect(again.text).toBe(first.text);
      expect(await count('orders', body.tag)).toBe(0);
    });

    it('the write-skew race under @Transactional({ isolationLevel: SERIALIZABLE }): one 201, one 503, whose retry gets 409', async () => {
      const slot = tag('slot-cls');
      const bodies = [
        { tag: tag('cls-a'), slot },
        { tag: tag('cls-b'), slot },
      ];
      const answers = await Promise.all(
        bodies.map((body) => send('/cls-isolation/book', body.tag, body)),
      );
      expect(answers.map((res) => res.status).sort()).toEqual([201, 503]);
      const loser = answers.findIndex((res) => res.status === 503);
      expect(answers[loser].body).toMatchObject({ code: 'database_transient', status: 503 });
      const retry = await send('/cls-isolation/book', bodies[loser].tag, bodies[loser]);
      expect(retry.status).toBe(409);
      const { rows } = await db.query<{ n: string }>(
        'SELECT count(*) AS n FROM bookings WHERE slot = $1',
        [slot],
      );
      expect(Number(rows[0].n)).toBe(1);
    });
  });

  /** Waits until every named left-over write has an outcome; returns them in order. */
  const settled = async (names: string[]) => {
    for (let i = 0; i < 150 && !names.every((name) => laterOutcomes.has(name)); i++)
      await sleep(20);
    return names.map((name) => laterOutcomes.get(name));
  };
});
