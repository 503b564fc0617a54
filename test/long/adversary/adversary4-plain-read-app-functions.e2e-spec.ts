import {
  Body,
  ConflictException,
  Controller,
  type INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 4: "Only a provable plain read runs before the transaction … no function
 * call other than PostgreSQL's own functions that have no effect" (transactions.md). The check
 * (`isPlainRead`, sql-text.ts) takes a call for PostgreSQL's own by its name alone, and takes
 * anything the v18 parse tree does not show as a `FuncCall` for no call at all. PostgreSQL 15
 * calls the app's function in three such texts:
 *
 * - an overload of a listed name: `lower(integer)` of the app's (pg_catalog has `lower(text)`,
 *   and an integer argument picks the app's: functions are resolved by their arguments too);
 * - `json_value(…)`: PostgreSQL 17 syntax, a `JsonFuncExpr` in the v18 tree, while PostgreSQL 15
 *   has no such built-in and calls the app's `json_value(jsonb, text)` (a common shim of
 *   MySQL's and SQL Server's JSON_VALUE);
 * - an operator of the app's (`###`), whose function runs as any other does.
 *
 * Each is run apart, before the request's transaction and outside it: its effect commits on
 * its own, and stays when the handler fails after it (the docs: "the effects rolled back, the
 * error answer stored"). The control: the same function called by a name of its own
 * (`audit_view`) opens the transaction, and its effect rolls back with the request.
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

describe('adversary 4: a "plain read" that calls a function of the app', () => {
  let fixture: PoolApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startPoolApp('adv4_plain_read_fns', {
      module: ReadModule,
      max: 2,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
        // The app's audit of what was read: a write, made by functions a SELECT calls.
        await admin.query('CREATE TABLE audit (tag text NOT NULL)');
        await admin.query(`CREATE FUNCTION audit_view(tag text) RETURNS text LANGUAGE sql AS
          $$ INSERT INTO audit VALUES (tag) RETURNING tag $$`);
        await admin.query(`CREATE FUNCTION lower(tag integer) RETURNS text LANGUAGE sql AS
          $$ SELECT audit_view('lower-' || tag) $$`);
        await admin.query(`CREATE FUNCTION json_value(doc jsonb, path text) RETURNS text
          LANGUAGE sql AS $$ SELECT audit_view('json_value-' || (doc ->> path)) $$`);
        await admin.query(`CREATE FUNCTION audited_sum(a integer, b integer) RETURNS integer
          LANGUAGE sql AS $$ SELECT length(audit_view('op-' || a)) + b $$`);
        await admin.query(
          'CREATE OPERATOR ### (LEFTARG = integer, RIGHTARG = integer, FUNCTION = audited_sum)',
        );
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  const audited = async (tag: string) =>
    (await admin.query('SELECT 1 FROM audit WHERE tag = $1', [tag])).rows.length;
  const kept = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;

  it.each([
    // The control: the app's function by a name of its own.
    ['audit_view', "SELECT audit_view('own-name')", 'own-name'],
    ['an overload of lower', 'SELECT lower(5)', 'lower-5'],
    [
      'json_value (PostgreSQL 17 syntax)',
      `SELECT json_value('{"id": "j1"}'::jsonb, 'id')`,
      'json_value-j1',
    ],
    ['an operator', 'SELECT 7 ### 1', 'op-7'],
  ])(
    '%s: the read runs in the request, and rolls back with it when the handler fails',
    async (name, read, tag) => {
      const slot = `read-${tag}`;
      const send = () =>
        request(app.getHttpServer())
          .post('/read-then-fail')
          .set('Idempotency-Key', slot)
          .send({ slot, read });
      const first = await send();
      const retry = await send();
      expect({
        status: first.status,
        replayed: retry.headers['idempotent-replayed'],
        slot: await kept(slot),
        audited: await audited(tag),
      }).toEqual({ status: 409, replayed: 'true', slot: 0, audited: 0 });
      // Observed for all but audit_view: audited 1, committed apart before the transaction
      // opened, though the request rolled back and stored its 409.
    },
    30_000,
  );
});
