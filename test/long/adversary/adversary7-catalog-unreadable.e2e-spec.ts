import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, RetryLaterError } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { adminUrl, createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 7: f170a59 keeps a read of the app's view out of the read-only "apart"
 * path by a list read once at start-up (`SHADOWED_BUILT_INS_QUERY`, which joins pg_proc,
 * pg_depend, pg_class, pg_type, pg_cast). When that statement fails, `learnServerLevel`
 * swallows the error (`.catch(() => undefined)`) and the lists stay empty: every view read is
 * a "plain read" again and runs apart, where a large object it stores commits on its own
 * (round 6's break, back in silence). It fails for good on a database hardened the common way
 * against reading other roles' function sources: `REVOKE SELECT ON pg_catalog.pg_proc FROM
 * PUBLIC` (the app's role then gets 42501 on the start-up statement, on every try), while the
 * app's own statements and functions run as before. No log, no refusal: the request's 503 and
 * its retry leave two snapshots for one 201.
 *
 * The control, on the same app: the function by its own name (not a plain read) runs in the
 * request's transaction, one snapshot. With the catalog readable, the view case passes
 * (adversary6-read-only-escapes); it is not run here because the lists are kept for the
 * process, and a readable catalog in this file would fill them.
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

describe('adversary 7: the start-up catalog statement refused (pg_proc not readable)', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;
  const role = `adv7_app_${randomBytes(4).toString('hex')}`;

  beforeAll(async () => {
    database = await createTestDatabase('adv7_catalog_unreadable');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
    await admin.query(`CREATE FUNCTION snapshot(tag text) RETURNS oid LANGUAGE sql AS
      $$ SELECT lo_from_bytea(0, convert_to(tag, 'UTF8')) $$`);
    await admin.query(`CREATE VIEW snapshots_view AS SELECT snapshot('lo-view') AS id`);
    await admin.query(`CREATE ROLE ${role} LOGIN`);
    await admin.query(`GRANT ALL ON ALL TABLES IN SCHEMA public TO ${role}`);
    await admin.query(`GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO ${role}`);
    // The hardening: other roles' function sources hidden (this database's catalog only).
    await admin.query('REVOKE SELECT ON pg_catalog.pg_proc FROM PUBLIC');
    const url = new URL(adminUrl());
    url.username = role;
    url.pathname = `/${database.name}`;
    pool = createTestPool({ connectionString: url.toString(), max: 2 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(ReadModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await endTestPool(pool);
    await admin?.end();
    await database?.drop();
    const root = new Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${role}`);
    await root.end();
  });

  const snapshots = async (tag: string) =>
    (
      await admin.query(
        `SELECT 1 FROM pg_largeobject_metadata m
          WHERE convert_from(lo_get(m.oid), 'UTF8') = $1`,
        [tag],
      )
    ).rows.length;

  it.each([
    ['the function by its own name (the control)', "SELECT snapshot('lo-name')", 'lo-name'],
    ['a view storing a large object', 'SELECT id FROM snapshots_view', 'lo-view'],
  ])(
    '%s: a 503 then its retry leave the effect once',
    async (_name, read, tag) => {
      const slot = `slot-${tag}`;
      const send = () =>
        request(app.getHttpServer())
          .post('/read-then-write')
          .set('Idempotency-Key', slot)
          .send({ slot, read });
      const first = await send();
      const retry = await send();
      // Observed for the view: { first: 503, retry: 201, effects: 2 }.
      expect({ first: first.status, retry: retry.status, effects: await snapshots(tag) }).toEqual({
        first: 503,
        retry: 201,
        effects: 1,
      });
    },
    30_000,
  );
});
