import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client, type Pool } from 'pg';
import { DataSource } from 'typeorm';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';
import { createTestPool, endTestPool } from '../../support/test-pool.js';

/**
 * Adversary, round 6: round 5's fix runs a plain read apart in a read-only transaction, and
 * "one that would write (25006) runs again in the request's transaction" (transactions.md).
 * That holds only when the 25006 reaches the library. A best-effort audit in PL/pgSQL catches
 * its own failure, the common idiom for work that must never fail the read:
 *
 *   BEGIN INSERT INTO audit …; EXCEPTION WHEN others THEN RAISE WARNING …; END;
 *
 * Reached through a view (`SELECT … FROM orders_seen`), its INSERT meets the read-only mode
 * the library put there, the block swallows the 25006, and the read succeeds apart: the
 * library never learns that it would have written, and does not run it again. The handler
 * answers 201 and commits, and the audit row is gone for good. Without the library the read
 * runs in autocommit, the INSERT succeeds, the row is kept; in the request's transaction (the
 * function by its own name) it commits with the answer. Silent loss of the app's write.
 */
let pool: Pool;

async function readThenWrite(
  query: (text: string, values?: unknown[]) => Promise<unknown>,
  body: { slot: string; read: string },
) {
  await query(body.read);
  await query('INSERT INTO slots (slot) VALUES ($1)', [body.slot]);
  return { slot: body.slot };
}

@Controller()
class PoolReadController {
  @Post('read-then-write')
  @Idempotent()
  idempotent(@Body() body: { slot: string; read: string }) {
    return readThenWrite(
      (text, values) => (values ? pool.query(text, values) : pool.query(text)),
      body,
    );
  }

  @Post('plain/read-then-write')
  plain(@Body() body: { slot: string; read: string }) {
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
  idempotent(@Body() body: { slot: string; read: string }) {
    return readThenWrite((text, values) => this.dataSource.query(text, values), body);
  }

  @Post('plain/read-then-write')
  plain(@Body() body: { slot: string; read: string }) {
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

describe('adversary 6: a read whose function swallows the read-only refusal', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;
  let ormApp: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv6_read_only_swallowed');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE slots (id serial PRIMARY KEY, slot text NOT NULL)');
    await admin.query('CREATE TABLE audit (tag text NOT NULL)');
    // Best effort: an audit that fails must never fail the read.
    await admin.query(`CREATE FUNCTION note_seen(tag text) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
        INSERT INTO audit VALUES (tag);
        RETURN tag;
      EXCEPTION WHEN others THEN
        RAISE WARNING 'audit of % skipped: %', tag, SQLERRM;
        RETURN tag;
      END $$`);
    await admin.query('CREATE TABLE orders (id text PRIMARY KEY)');
    await admin.query("INSERT INTO orders VALUES ('o-1')");
    await admin.query(`CREATE VIEW orders_seen AS
      SELECT id, note_seen('seen-' || id) AS seen FROM orders`);
    pool = createTestPool({ connectionString: database.url, max: 2 });
    pool.on('error', () => undefined);
    app = await bootstrapTestApp(PoolReadModule, 'express');
    ormApp = await bootstrapTestApp(ormModule(database.url), 'express');
  });

  afterAll(async () => {
    await app?.close();
    await ormApp?.close();
    await endTestPool(pool);
    await admin?.end();
    await database?.drop();
  });

  beforeEach(() => admin.query('TRUNCATE audit, slots'));

  const audited = async () => (await admin.query('SELECT 1 FROM audit')).rows.length;
  const kept = async (slot: string) =>
    (await admin.query('SELECT 1 FROM slots WHERE slot = $1', [slot])).rows.length;

  const reads = [
    ['the function by its own name', "SELECT note_seen('seen-o-1')"],
    ['a view calling it', 'SELECT id, seen FROM orders_seen'],
  ];
  const rows = ['pool', 'typeorm'].flatMap((seam) =>
    ['plain/', ''].flatMap((route) => reads.map(([name, read]) => [seam, route, name, read])),
  );

  it.each(rows)(
    '%s, route /%sread-then-write, %s: 201 and the audit row kept, once',
    async (seam, route, _name, read) => {
      const slot = `slot-${seam}-${route}-${read.length}`;
      const server = (seam === 'pool' ? app : ormApp).getHttpServer();
      const send = () =>
        request(server)
          .post(`/${route}read-then-write`)
          .set('Idempotency-Key', slot)
          .send({ slot, read });
      const first = await send();
      expect({ status: first.status, slot: await kept(slot), audited: await audited() }).toEqual({
        status: 201,
        slot: 1,
        audited: 1,
      });
    },
    30_000,
  );
});
