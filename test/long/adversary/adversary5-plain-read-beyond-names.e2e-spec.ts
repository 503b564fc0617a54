import { readFileSync } from 'node:fs';
import {
  Body,
  ConflictException,
  Controller,
  type INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client, type Pool } from 'pg';
import { DataSource } from 'typeorm';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 5: "Only a provable plain read runs before the transaction … no function
 * call other than PostgreSQL's own functions that have no effect" (transactions.md). Round 4's
 * fix reads the app's shadowing functions and operators once, keeping only VOLATILE ones, and
 * lets every relation and every type through. PostgreSQL 15 runs the app's code, and its
 * writes, in each of these texts, which `isPlainRead` takes for plain:
 *
 * - a view whose SELECT calls the app's function: `SELECT tag FROM audited_view` (a view is a
 *   `RangeVar`, as a table is; the function is not in the text at all);
 * - a STABLE overload of a listed name (`lower(bigint)`): PostgreSQL refuses a write in a
 *   STABLE function's own statements, not in the VOLATILE function it calls, so the shadow
 *   query's `provolatile = 'v'` misses it;
 * - an aggregate of the app's under a listed name (`sum(text)`): pg_proc keeps every
 *   aggregate as IMMUTABLE ("not needed for agg"), whatever its state function does;
 * - a cast of the app's, `CREATE CAST … WITH FUNCTION` (`5::money2`): a `TypeCast` node;
 * - a domain whose CHECK calls the app's function (`7::checked_int`).
 *
 * Each is run apart, before the request's transaction and outside it: its effect (an audit
 * row) commits on its own and stays after the handler's 409 rolled back ("the effects rolled
 * back, the error answer stored"). The control, the function by its own name, rolls back.
 */
let pool: Pool;

@Controller()
class ReadController {
  /** A read first (before any write), then the handler's write, then it fails. */
  @Post('read-then-fail')
  @Idempotent()
  async readThenFail(@Body() body: { slot: string; read: string }) {
    await pool.query(body.read);
    await pool.query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
    throw new ConflictException('the order was already shipped');
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ReadController],
})
class ReadModule {}

/** The same on TypeORM: `dataSource.query()`, whose reads before a write run apart too. */
@Controller()
class OrmReadController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('read-then-fail')
  @Idempotent()
  async readThenFail(@Body() body: { slot: string; read: string }) {
    await this.dataSource.query(body.read);
    await this.dataSource.query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
    throw new ConflictException('the order was already shipped');
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

describe('adversary 5: a "plain read" that runs the app code through a view, a type, an aggregate', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;
  let ormApp: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv5_plain_read_beyond');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
    // The app's audit of what was read: a write, made by functions a SELECT reaches.
    await admin.query('CREATE TABLE audit (tag text NOT NULL)');
    await admin.query(`CREATE FUNCTION audit_view(tag text) RETURNS text LANGUAGE sql AS
      $$ INSERT INTO audit VALUES (tag) RETURNING tag $$`);
    await admin.query(`CREATE VIEW audited_view AS SELECT audit_view('view') AS tag`);
    await admin.query(`CREATE FUNCTION lower(tag bigint) RETURNS text STABLE LANGUAGE sql AS
      $$ SELECT audit_view('stable-lower-' || tag) $$`);
    await admin.query(`CREATE FUNCTION audited_concat(acc text, x text) RETURNS text
      LANGUAGE sql AS $$ SELECT coalesce(acc, '') || audit_view('aggregate-' || x) $$`);
    await admin.query('CREATE AGGREGATE sum(text) (SFUNC = audited_concat, STYPE = text)');
    await admin.query('CREATE TYPE money2 AS (amount integer)');
    await admin.query(`CREATE FUNCTION to_money2(integer) RETURNS money2 LANGUAGE sql AS
      $$ SELECT ROW(length(audit_view('cast-' || $1)))::money2 $$`);
    await admin.query('CREATE CAST (integer AS money2) WITH FUNCTION to_money2(integer)');
    await admin.query(`CREATE FUNCTION audited_check(integer) RETURNS boolean LANGUAGE sql AS
      $$ SELECT audit_view('domain-' || $1) IS NOT NULL $$`);
    await admin.query('CREATE DOMAIN checked_int AS integer CHECK (audited_check(VALUE))');
    pool = createTestPool({ connectionString: database.url, max: 2 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(ReadModule, 'express');
    ormApp = await bootstrapTestApp(ormModule(database.url), 'express');
  });

  afterAll(async () => {
    await app?.close();
    await ormApp?.close();
    await endTestPool(pool);
    await admin?.end();
    await database?.drop();
  });

  const audited = async (tag: string) =>
    (await admin.query('SELECT 1 FROM audit WHERE tag = $1', [tag])).rows.length;
  const kept = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;

  const cases = [
    // The control: the app's function by a name of its own.
    ['audit_view', "SELECT audit_view('own-name')", 'own-name'],
    ['a view', 'SELECT tag FROM audited_view', 'view'],
    ['a STABLE overload of lower', 'SELECT lower(5::bigint)', 'stable-lower-5'],
    ['an aggregate named sum', "SELECT sum(x) FROM (SELECT 'a'::text AS x) s", 'aggregate-a'],
    ['a cast of the app', 'SELECT 5::money2', 'cast-5'],
    ['a domain with a CHECK', 'SELECT 7::checked_int', 'domain-7'],
  ];
  it.each(
    ['pool', 'typeorm'].flatMap((seam) =>
      cases.map(([name, read, tag]) => [seam, name, read, tag] as const),
    ),
  )(
    '%s, %s: the read runs in the request, and rolls back with it when the handler fails',
    async (seam, _name, read, tag) => {
      const slot = `read-${seam}-${tag}`;
      const server = (seam === 'pool' ? app : ormApp).getHttpServer();
      const send = () =>
        request(server).post('/read-then-fail').set('Idempotency-Key', slot).send({ slot, read });
      const first = await send();
      const retry = await send();
      expect({
        status: first.status,
        replayed: retry.headers['idempotent-replayed'],
        slot: await kept(slot),
        audited: await audited(tag),
      }).toEqual({ status: 409, replayed: 'true', slot: 0, audited: 0 });
    },
    30_000,
  );
});
