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
 * Adversary, round 2 (issue 27): the Drizzle RLS recipe (`SET LOCAL ROLE` in
 * `db.transaction()`), with the service's own work running beside it (`Promise.all`, `db`
 * rather than `tx`), which data-layers.md lets through ("if that nested transaction commits,
 * both are kept"). On the request's one connection the beside UPDATE runs inside the nested
 * transaction's savepoint, after its SET LOCAL ROLE: as the restricted role, which row-level
 * security lets touch no row, in silence (the order fixed by promises, not timing). 201 stored and replayed, the counter 0; without
 * `@Idempotent()` the UPDATE runs on a connection of its own as the pool's role: 1. The
 * outermost restore (pool-transaction.ts endSavepoint) comes only at the nested COMMIT, after.
 * Expected: the beside statement runs as the request's role (or is refused, as a beside
 * statement is refused when the nested transaction rolls back); never a silent no-op. Now
 * refused as it is sent (StatementBesideNestedTransactionError), the request rolled back.
 * Round 3 set the role as `set_config(E'r\\x6fle', …, true)` (PostgreSQL reads the name
 * 'role'), which the reader did not see: refused the same now.
 */
let pool: Pool;
let db: NodePgDatabase;
let role: string;
/** The errors the service statement met. */
const refusals: string[] = [];

/** How the nested transaction sets its role: `SET LOCAL ROLE`, or an escaped set_config. */
type How = 'local' | 'escaped';

async function handle(body: { note: string; how: How }) {
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
    await tx.execute(
      sql.raw(
        body.how === 'local'
          ? `set local role ${role}`
          : `select set_config(E'r\\x6fle', '${role}', true)`,
      ),
    );
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
  idempotent(@Body() body: { note: string; how: How }) {
    return handle(body);
  }

  @Post('plain-notes')
  plain(@Body() body: { note: string; how: How }) {
    return handle(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

describe('a statement beside a nested transaction that set its role', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('beside_nested_role');
    role = `adv2_beside_${database.name.slice(-8)}`;
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

  it.each<How>(['local', 'escaped'])(
    'refuses the beside UPDATE rather than run it as the nested transaction’s role (%s): 500, nothing kept, replayed',
    async (how) => {
      // The control: without @Idempotent() the counter moves.
      const plainBefore = await counter();
      const plain = await request(app.getHttpServer())
        .post('/plain-notes')
        .send({ note: `plain ${how}`, how });
      expect({ status: plain.status, counted: (await counter()) - plainBefore }).toEqual({
        status: 201,
        counted: 1,
      });

      refusals.length = 0;
      const before = await counter();
      const send = () =>
        request(app.getHttpServer())
          .post('/notes')
          .set('Idempotency-Key', `beside-${how}`)
          .send({ note: `hello ${how}`, how });
      const answer = await send();
      const replay = await send();
      const { rows } = await admin.query('SELECT 1 FROM notes WHERE body = $1', [`hello ${how}`]);
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
    },
  );
});
