import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Notification, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, RetryLaterError } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 8: transactions.md: "Only a provable plain read runs before the
 * transaction … Anything else opens the transaction: … a `SELECT` of the app's own function".
 * PostgreSQL also calls a function of one composite argument written as a column of its row
 * (`s.receipt` is `receipt(s)`: the "computed column" that PostgREST and Hasura expose). The
 * parse tree holds a `ColumnRef`, which `isPlainRead` takes as a column: such a read runs
 * apart, in the read-only transaction of its round trip, which lets a large object or a
 * `pg_notify` through (adversary6-read-only-escapes: round 6 closed that road for views only).
 *
 * What a user does: before its write, the handler reads a computed column of its table whose
 * function stores a large object (a receipt snapshot) or notifies listeners (a "viewed"
 * event); the first attempt then fails for a passing reason (`RetryLaterError`: 503, "rolled
 * back, nothing stored", the retry "runs it once").
 * What happens: the read's effect committed apart, and the retry's read makes it again: two
 * large objects (two notifications) for one 201.
 * What also happens: a computed column whose function writes through dblink (an audit row, the
 * usual "autonomous" recipe) and then locally: its local write meets 25006 apart, and the read
 * runs again in the request's transaction: two audit rows for one request that succeeded at once.
 * What should happen: once, as with the same function called by name (`receipt(s)`, the
 * control), which opens the request's transaction and rolls back with the first attempt.
 */
let pool: Pool;
const failedOnce = new Set<string>();

@Controller()
class ReadController {
  @Post('read-then-write')
  @Idempotent()
  async readThenWrite(@Body() body: { slot: string; read: string }) {
    await pool.query(body.read);
    await pool.query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
    if (!failedOnce.has(body.slot)) {
      failedOnce.add(body.slot);
      throw new RetryLaterError('the warehouse is busy', 1);
    }
    return { slot: body.slot };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReadController],
})
class ReadModule {}

describe('adversary 8: a computed column (s.fn) of the app runs apart', () => {
  let fixture: PoolApp;
  let admin: Client;
  let listener: Client;
  let app: INestApplication;
  const notified: string[] = [];

  beforeAll(async () => {
    fixture = await startPoolApp('adv8_computed_column', {
      module: ReadModule,
      max: 3,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
        await owner.query(
          "CREATE TABLE tags (id int PRIMARY KEY, tag text NOT NULL); INSERT INTO tags VALUES (1, 'x')",
        );
        // A receipt snapshot kept as a large object, and a "viewed" event for the app's listeners.
        await owner.query(`CREATE FUNCTION receipt(t tags) RETURNS oid LANGUAGE sql AS
          $$ SELECT lo_from_bytea(0, convert_to(t.tag, 'UTF8')) $$`);
        // An audit row written through dblink (an autonomous write: kept whatever the caller's
        // transaction does, the usual recipe), then the tag's read count bumped.
        await owner.query('CREATE EXTENSION dblink');
        await owner.query('CREATE TABLE audit (id serial PRIMARY KEY, what text NOT NULL)');
        await owner.query('ALTER TABLE tags ADD COLUMN reads int NOT NULL DEFAULT 0');
        await owner.query(`CREATE FUNCTION audited(t tags) RETURNS text LANGUAGE plpgsql AS $$
          BEGIN
            PERFORM dblink_exec('dbname=' || current_database() || ' host=127.0.0.1 user=postgres',
              'INSERT INTO audit (what) VALUES (''read'')');
            UPDATE tags SET reads = reads + 1 WHERE id = t.id;
            RETURN t.tag;
          END $$`);
        await owner.query(`CREATE FUNCTION viewed(t tags) RETURNS text LANGUAGE sql AS
          $$ SELECT pg_notify('app_events', 'viewed'); SELECT t.tag $$`);
      },
    });
    ({ admin, app } = fixture);
    listener = new Client({ connectionString: fixture.database.url });
    await listener.connect();
    listener.on('notification', (message: Notification) => notified.push(message.payload ?? ''));
    await listener.query('LISTEN app_events');
  });

  afterAll(async () => {
    await listener?.end();
    await fixture?.close();
  });

  const post = (slot: string, read: string) =>
    request(app.getHttpServer()).post('/read-then-write').set('Idempotency-Key', slot).send({
      slot,
      read,
    });
  const largeObjects = async () =>
    Number((await admin.query('SELECT count(*) AS n FROM pg_largeobject_metadata')).rows[0].n);
  const settle = () => new Promise((resolve) => setTimeout(resolve, 300));

  it.each([
    ['receipt(t), by name (the control)', 'by-name', 'SELECT receipt(t) FROM tags t'],
    ['t.receipt, a computed column', 'computed', 'SELECT t.receipt FROM tags t'],
  ])('a large object made by %s: once for one 201', async (_name, slot, read) => {
    const before = await largeObjects();
    const first = await post(slot, read);
    const retry = await post(slot, read);
    // Observed (computed column): 2 large objects; by name: 1.
    expect({
      first: first.status,
      retry: retry.status,
      made: (await largeObjects()) - before,
    }).toEqual({
      first: 503,
      retry: 201,
      made: 1,
    });
  });

  it.each([
    ['audited(t), by name (the control)', 'SELECT audited(t) FROM tags t'],
    ['t.audited, a computed column', 'SELECT t.audited FROM tags t'],
  ])(
    'an audited read by %s, in a request that succeeds at once: one audit row',
    async (name, read) => {
      const slot = `audit-${name.slice(0, 7)}`;
      failedOnce.add(slot); // no failure: one attempt
      await admin.query('DELETE FROM audit');
      const answer = await post(slot, read);
      // Observed (computed column): 2 audit rows: the read ran apart, its dblink write committed,
      // its UPDATE met 25006, and it ran again in the request's transaction. By name: 1.
      expect({
        status: answer.status,
        audit: (await admin.query('SELECT 1 FROM audit')).rows.length,
      }).toEqual({ status: 201, audit: 1 });
    },
  );

  it.each([
    ['viewed(t), by name (the control)', 'n-by-name', 'SELECT viewed(t) FROM tags t'],
    ['t.viewed, a computed column', 'n-computed', 'SELECT t.viewed FROM tags t'],
  ])('a notification sent by %s: once for one 201', async (_name, slot, read) => {
    notified.length = 0;
    const first = await post(slot, read);
    const retry = await post(slot, read);
    await settle();
    // Observed (computed column): 2 notifications; by name: 1.
    expect({ first: first.status, retry: retry.status, notified: notified.length }).toEqual({
      first: 503,
      retry: 201,
      notified: 1,
    });
  });
});
