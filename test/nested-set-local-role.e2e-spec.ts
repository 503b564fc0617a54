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
 * Session state that outlives a nested transaction (found by an adversarial review, issue 27).
 * The Supabase/Drizzle row-level-security recipe, as docs/guides/drizzle.md shows it:
 * `db.transaction(async (tx) => { await tx.execute(sql\`set local role authenticated\`); … })`,
 * then the handler goes on with its service work through `db` (a counter), as the pool's own
 * role. Without the library the nested transaction is a transaction of its own: its SET LOCAL
 * ends with it. In the request's transaction it is a savepoint, and RELEASE keeps SET LOCAL:
 * the service's UPDATE ran as `authenticated`, which row-level security let touch no row, in
 * silence (201 stored and replayed, the counter 0; without `@Idempotent()`: 1). Now the
 * outermost nested transaction's role, session authorization and search path are put back at
 * its COMMIT. The same through a pool client's own BEGIN … COMMIT.
 */
let pool: Pool;
let db: NodePgDatabase;
let role: string;

async function handle(body: { note: string; via: 'drizzle' | 'pg' }) {
  if (body.via === 'drizzle') {
    await db.transaction(async (tx) => {
      await tx.execute(sql.raw(`set local role ${role}`));
      await tx.execute(sql`select set_config('request.user', 'alice', true)`);
      await tx.execute(sql`INSERT INTO notes (owner, body) VALUES ('alice', ${body.note})`);
    });
  } else {
    const client = await pool.connect();
    try {
      await client.query('BEGIN');
      await client.query(`SET LOCAL ROLE ${role}`);
      await client.query(`SELECT set_config('request.user', 'alice', true)`);
      await client.query(`INSERT INTO notes (owner, body) VALUES ('alice', $1)`, [body.note]);
      await client.query('COMMIT');
    } finally {
      client.release();
    }
  }
  // The service's own work, as the pool's role (which bypasses row-level security).
  const counted = await db.execute(sql`UPDATE stats SET notes = notes + 1 WHERE id = 1`);
  return { note: body.note, counted: counted.rowCount };
}

@Controller()
class NotesController {
  @Post('notes')
  @Idempotent()
  idempotent(@Body() body: { note: string; via: 'drizzle' | 'pg' }) {
    return handle(body);
  }

  @Post('plain-notes')
  plain(@Body() body: { note: string; via: 'drizzle' | 'pg' }) {
    return handle(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

describe('SET LOCAL ROLE in a data layer’s transaction, nested in the request’s', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('nested_set_local_role');
    role = `nested_authenticated_${database.name.slice(-8)}`;
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

  it.each(['drizzle', 'pg'] as const)(
    'ends with it (%s): the service statement after it runs as the pool’s role, 201, the counter moved once',
    async (via) => {
      const before = (await admin.query<{ notes: number }>('SELECT notes FROM stats')).rows[0];
      const send = () =>
        request(app.getHttpServer())
          .post('/notes')
          .set('Idempotency-Key', `note-${via}`)
          .send({ note: `hello ${via}`, via });
      const answer = await send();
      const replay = await send();
      const { rows } = await admin.query<{ notes: number }>('SELECT notes FROM stats');
      expect({
        status: answer.status,
        body: answer.body as unknown,
        replayed: replay.text === answer.text,
        counted: rows[0].notes - before.notes,
      }).toEqual({
        status: 201,
        body: { note: `hello ${via}`, counted: 1 },
        replayed: true,
        counted: 1,
      });
    },
  );
});
