import { randomBytes } from 'node:crypto';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { adminUrl } from '../../support/database.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, row-level security the
 * PostgREST/Supabase way, docs/guides/transactions.md's `SET LOCAL ROLE`): the app logs in as
 * the database's owner; its own `internal` schema (job bookkeeping, not for tenants) has a
 * `DEFERRABLE INITIALLY DEFERRED` foreign key. Each request's work runs in a Drizzle
 * transaction under the tenant's role (`SET LOCAL ROLE web_user`), which is granted the
 * `public` tables it writes and, rightly, nothing in `internal`. Without the library: 201.
 *
 * What happens: the nested COMMIT's "deferred again" DO block (lib/data-layers/nested-commit.ts
 * DEFERRED_AGAIN) runs before the RELEASE, still under `web_user`, and names every initially
 * deferred constraint of the database, `internal`'s too: `SET CONSTRAINTS internal.… DEFERRED`
 * is refused, 42501 "permission denied for schema internal". Every tenant transaction fails
 * (500), on every retry.
 *
 * What should happen: 201 once, the note written once.
 *
 * Why it matters: a login that owns everything and a tenant role that may use only its API
 * schema is the standard row-level-security set-up; one deferred constraint in a schema the
 * tenant role cannot use breaks every request, even with the owner's login.
 */
let db: NodePgDatabase;
let pool: Pool;
const webUser = `adv13_web_${randomBytes(4).toString('hex')}`;

async function addNote({ text }: { text: string }) {
  const id = await db.transaction(async (tx) => {
    await tx.execute(sql.raw(`SET LOCAL ROLE ${webUser}`));
    const { rows } = await tx.execute<{ id: number }>(
      sql`INSERT INTO notes (text) VALUES (${text}) RETURNING id`,
    );
    return rows[0].id;
  });
  return { id, text };
}

@Controller()
class NotesController {
  @Post('plain')
  plain(@Body() body: { text: string }) {
    return addNote(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { text: string }) {
    return addNote(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

describe('adversary 13: the deferred-again block under a SET LOCAL ROLE without USAGE on a schema', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv13_deferred_set_role', {
      module: NotesModule,
      usePool: (started) => {
        pool = started;
        db = drizzle(started);
      },
      setup: async (admin) => {
        await admin.query(`
          CREATE ROLE ${webUser} NOLOGIN;
          CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL);
          GRANT SELECT, INSERT ON notes TO ${webUser};
          GRANT USAGE ON SEQUENCE notes_id_seq TO ${webUser};
          CREATE SCHEMA internal;
          CREATE TABLE internal.jobs (id int PRIMARY KEY);
          CREATE TABLE internal.job_steps (
            job_id int NOT NULL REFERENCES internal.jobs DEFERRABLE INITIALLY DEFERRED)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
    const root = new Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${webUser}`);
    await root.end();
  });

  const notes = async (text: string) =>
    (await fixture.admin.query('SELECT 1 FROM notes WHERE text = $1', [text])).rows.length;

  const post = (path: string, text: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ text });
  };

  it('without the library (no @Idempotent): 201 (control)', async () => {
    const answer = await post('/plain', 'a');
    expect({ status: answer.status, notes: await notes('a') }).toEqual({ status: 201, notes: 1 });
  }, 20_000);

  it('under @Idempotent(): 201 once, the note written once', async () => {
    const first = await post('/idempotent', 'b', 'key-1');
    const retry = await post('/idempotent', 'b', 'key-1');
    // Observed: { first: 500, retry: 500, notes: 0 } (42501 for schema internal).
    expect({ first: first.status, retry: retry.status, notes: await notes('b') }).toEqual({
      first: 201,
      retry: 201,
      notes: 1,
    });
  }, 20_000);
});
