import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client, type Notification, type Pool } from 'pg';
import { DataSource } from 'typeorm';
import request from 'supertest';
import { IdempotencyModule, Idempotent, RetryLaterError } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 6: round 5's fix runs a plain read apart "in a read-only transaction of its
 * round trip", so that what no text shows (a view whose query calls the app's function) "cannot
 * write there" (transactions.md). But PostgreSQL's read-only mode refuses only writes to
 * tables, sequences and DDL: checked in psql on PostgreSQL 15, after `SELECT
 * set_config('transaction_read_only', 'on', true)` these run and commit:
 *
 * - large objects: `lo_from_bytea`, `lo_put`, `lo_unlink` (pg_largeobject is written, the
 *   object is there after the COMMIT);
 * - `pg_notify` / `NOTIFY` (delivered at the COMMIT);
 * - also `pg_advisory_lock` (session level, kept), `COPY … TO` a server file, temp tables.
 *
 * So a view whose function stores a large object (a report snapshot) or sends a notification
 * (a cache invalidation, a "viewed" event) still runs apart, and commits apart from the
 * request's transaction. The handler then fails for a passing reason (a `RetryLaterError`:
 * 503, "rolled back, nothing stored, lease released", the retry "runs it once"): the retry runs
 * the read again, and its effect is there twice, once from the attempt that rolled back. Run
 * in the request's transaction (the control: the function by its own name, which
 * `isPlainRead` does not let apart), the rolled-back attempt's effect goes with it: once.
 */
let pool: Pool;
/** Keys whose first attempt already failed: the retry answers. */
const failedOnce = new Set<string>();

async function readThenWrite(
  query: (text: string, values?: unknown[]) => Promise<unknown>,
  body: { slot: string; read: string },
) {
  await query(body.read);
  await query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
  if (!failedOnce.has(body.slot)) {
    failedOnce.add(body.slot);
    throw new RetryLaterError('the warehouse is busy', 1);
  }
  return { slot: body.slot };
}

@Controller()
class PoolReadController {
  @Post('read-then-write')
  @Idempotent()
  readThenWrite(@Body() body: { slot: string; read: string }) {
    return readThenWrite(
      (text, values) => (values ? pool.query(text, values) : pool.query(text)),
      body,
    );
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [PoolReadController],
})
class PoolReadModule {}

@Controller()
class OrmReadController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('read-then-write')
  @Idempotent()
  readThenWrite(@Body() body: { slot: string; read: string }) {
    return readThenWrite((text, values) => this.dataSource.query(text, values), body);
  }
}

function ormModule(url: string) {
  @Module({
    imports: [
      TypeOrmModule.forRoot({ type: 'postgres', url, extra: { max: 2 } }),
      IdempotencyModule.forRoot({ globalKeys: true }),
    ],
    controllers: [OrmReadController],
  })
  class OrmReadModule {}
  return OrmReadModule;
}

describe('adversary 6: a read apart in read-only mode still stores a large object or notifies', () => {
  let database: TestDatabase;
  let admin: Client;
  let listener: Client;
  let app: INestApplication;
  let ormApp: INestApplication;
  const notified: string[] = [];

  beforeAll(async () => {
    database = await createTestDatabase('adv6_read_only_escapes');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
    // A report snapshot kept as a large object, and an event sent to the app's listeners.
    await admin.query(`CREATE FUNCTION snapshot(tag text) RETURNS oid LANGUAGE sql AS
      $$ SELECT lo_from_bytea(0, convert_to(tag, 'UTF8')) $$`);
    await admin.query(`CREATE FUNCTION announce(tag text) RETURNS text LANGUAGE sql AS
      $$ SELECT pg_notify('app_events', tag); SELECT tag $$`);
    for (const seam of ['pool', 'typeorm']) {
      await admin.query(`CREATE VIEW snapshot_${seam} AS SELECT snapshot('lo-view-${seam}') AS id`);
      await admin.query(
        `CREATE VIEW announce_${seam} AS SELECT announce('notify-view-${seam}') AS t`,
      );
    }
    listener = new Client({ connectionString: database.url });
    await listener.connect();
    listener.on('notification', (message: Notification) => notified.push(message.payload ?? ''));
    await listener.query('LISTEN app_events');
    pool = createTestPool({ connectionString: database.url, max: 2 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(PoolReadModule, 'express');
    ormApp = await bootstrapTestApp(ormModule(database.url), 'express');
  });

  afterAll(async () => {
    await app?.close();
    await ormApp?.close();
    await endTestPool(pool);
    await listener?.end();
    await admin?.end();
    await database?.drop();
  });

  const snapshots = async (tag: string) =>
    (
      await admin.query(
        `SELECT 1 FROM pg_largeobject_metadata m
          WHERE convert_from(lo_get(m.oid), 'UTF8') = $1`,
        [tag],
      )
    ).rows.length;
  const notifications = async (tag: string) => {
    // Notifications come in on the listener's socket: a round trip lets those sent arrive.
    await listener.query('SELECT 1');
    return notified.filter((payload) => payload === tag).length;
  };
  const kept = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;

  const cases = (seam: string) =>
    [
      // The controls: the function by its own name runs in the request's transaction.
      ['snapshot by name', `SELECT snapshot('lo-name-${seam}')`, `lo-name-${seam}`, snapshots],
      [
        'a view storing a large object',
        `SELECT id FROM snapshot_${seam}`,
        `lo-view-${seam}`,
        snapshots,
      ],
      [
        'announce by name',
        `SELECT announce('notify-name-${seam}')`,
        `notify-name-${seam}`,
        notifications,
      ],
      [
        'a view sending a notification',
        `SELECT t FROM announce_${seam}`,
        `notify-view-${seam}`,
        notifications,
      ],
    ] as const;

  it.each(
    ['pool', 'typeorm'].flatMap((seam) =>
      cases(seam).map(([name, read, tag, count]) => [seam, name, read, tag, count] as const),
    ),
  )(
    '%s, %s: a 503 then its retry leave the effect once, as the answer',
    async (seam, _name, read, tag, count) => {
      const slot = `slot-${tag}`;
      const server = (seam === 'pool' ? app : ormApp).getHttpServer();
      const send = () =>
        request(server).post('/read-then-write').set('Idempotency-Key', slot).send({ slot, read });
      const first = await send();
      const retry = await send();
      expect({
        first: first.status,
        retry: retry.status,
        slot: await kept(slot),
        effects: await count(tag),
      }).toEqual({ first: 503, retry: 201, slot: 1, effects: 1 });
    },
    30_000,
  );
});
