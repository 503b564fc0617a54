import { readFileSync } from 'node:fs';
import { Body, Controller, type INestApplication, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { createTestPool, endTestPool } from './support/test-pool.js';

/**
 * adversary3 (issue 27): round 2 refuses a statement beside a nested transaction that set its
 * role (pool-transaction.ts refuseBesideIdentity), as told by sql-text.ts setsIdentity, which
 * reads set_config's name only as a plain '…' string. The same RLS recipe with the role set as
 * `set_config(E'r\\x6fle', …, true)` (PostgreSQL reads the name 'role') is not marked: the
 * service's UPDATE beside it runs inside its savepoint as the restricted role and touches no
 * row, in silence: 201 stored, the counter unmoved (1 without @Idempotent()).
 */
let pool: Pool;
let db: NodePgDatabase;
let role: string;
/** The errors the service statement met. */
const refusals: string[] = [];

async function handle(body: { note: string }) {
  let counted: number | null = null;
  // The order is fixed (no timing): the service work starts once the transaction has set its
  // role, and the transaction awaits it before its insert (work of the request in parallel).
  let roleSet!: () => void;
  const ready = new Promise<void>((resolve) => (roleSet = resolve));
  const service = (async () => {
    await ready;
    // The service's own work, as the pool's role (which bypasses row-level security).
    try {
      counted = (await db.execute(sql`UPDATE stats SET notes = notes + 1 WHERE id = 1`)).rowCount;
    } catch (error) {
      refusals.push(((error as { cause?: Error }).cause ?? (error as Error)).name);
      throw error;
    }
  })();
  await db.transaction(async (tx) => {
    await tx.execute(sql.raw(`select set_config(E'r\\x6fle', '${role}', true)`));
    await tx.execute(sql`select set_config('request.user', 'alice', true)`);
    roleSet();
    await service;
    await tx.execute(sql`INSERT INTO notes (owner, body) VALUES ('alice', ${body.note})`);
  });
  return { note: body.note, counted };
}

@Controller()
class NotesController {
  @Post('notes')
  @Idempotent()
  idempotent(@Body() body: { note: string }) {
    return handle(body);
  }

  @Post('plain-notes')
  plain(@Body() body: { note: string }) {
    return handle(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

describe('adversary3: beside a nested transaction that set its role through an E-string set_config', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv3_beside_escape');
    role = `adv3_besc_${database.name.slice(-8)}`;
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query(`
      CREATE ROLE ${role} NOLOGIN;
      CREATE TABLE notes (id serial PRIMARY KEY, owner text NOT NULL, body text NOT NULL);
      CREATE TABLE stats (id int PRIMARY KEY, notes int NOT NULL);
      INSERT INTO stats VALUES (1, 0);
      GRANT SELECT, INSERT, UPDATE ON notes, stats TO ${role};
      GRANT USAGE ON SEQUENCE notes_id_seq TO ${role};
      ALTER TABLE notes ENABLE ROW LEVEL SECURITY;
      ALTER TABLE stats ENABLE ROW LEVEL SECURITY;
      CREATE POLICY own_notes ON notes TO ${role}
        USING (owner = current_setting('request.user', true))
        WITH CHECK (owner = current_setting('request.user', true));`);
    pool = createTestPool({ connectionString: database.url, max: 4 });
    db = drizzle({ client: pool });
    app = await bootstrapTestApp(NotesModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await endTestPool(pool);
    await admin?.end();
    await database?.drop();
    const cluster = new Client({ connectionString: process.env.TEST_DATABASE_URL });
    await cluster.connect();
    await cluster.query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
    await cluster.end();
  });

  const counter = async () =>
    (await admin.query<{ notes: number }>('SELECT notes FROM stats')).rows[0].notes;

  it('refuses the beside UPDATE rather than run it as the nested transaction’s role: 500, nothing kept, replayed', async () => {
    // The control: without @Idempotent() the counter moves.
    const plainBefore = await counter();
    const plain = await request(app.getHttpServer()).post('/plain-notes').send({ note: 'plain' });
    expect({ status: plain.status, counted: (await counter()) - plainBefore }).toEqual({
      status: 201,
      counted: 1,
    });

    refusals.length = 0;
    const before = await counter();
    const send = () =>
      request(app.getHttpServer())
        .post('/notes')
        .set('Idempotency-Key', 'beside-1')
        .send({ note: 'hello' });
    const answer = await send();
    const replay = await send();
    const { rows } = await admin.query("SELECT 1 FROM notes WHERE body = 'hello'");
    expect({
      status: answer.status,
      refusals,
      replayed: replay.text === answer.text,
      counted: (await counter()) - before,
      notes: rows.length,
    }).toEqual({
      status: 500,
      refusals: ['StatementBesideNestedTransactionError'],
      replayed: true,
      counted: 0,
      notes: 0,
    });
  });
});
