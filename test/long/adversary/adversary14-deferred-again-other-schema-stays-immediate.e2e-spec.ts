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
 * What the app does (Drizzle on the pool given to the library, docs/guides/transactions.md's
 * row-level-security recipe): it logs in as the database's owner. A request first writes the
 * tenant's note in a Drizzle transaction under `SET LOCAL ROLE web_user` (granted `public`'s
 * tables, nothing in `internal`), then, as the owner, records a job in a second Drizzle
 * transaction: the job's step first, then the job, under the `DEFERRABLE INITIALLY DEFERRED`
 * foreign key of `internal.job_steps` (the docs: "a second nested transaction may again insert
 * a child before its parent under a deferred foreign key"). Without the library: 201.
 *
 * What happens: the first nested COMMIT's check (RUN_DEFERRED_AS_COMMIT) runs before the
 * RELEASE, still as `web_user`: `SET CONSTRAINTS ALL IMMEDIATE` makes every constraint
 * immediate, `internal`'s included, but `has_schema_privilege` (web_user has no USAGE on
 * `internal`) leaves `internal.job_steps_job_id_fkey` out of the names set DEFERRED again.
 * The owner's second transaction then meets the foreign key at once: 23503 on the step's
 * INSERT, 500, on every retry.
 *
 * What should happen: 201 once, the job and its step written once, as without the library
 * (each transaction begins with every constraint in its initial mode).
 *
 * Why it matters: round 13's fix for the 42501 (leaving out schemas the narrowed role may not
 * use) decides by the role the nested transaction narrowed to, not the one the request goes
 * on with; an ordinary correct program (tenant work, then the owner's bookkeeping that relies
 * on a deferred foreign key) fails for ever.
 */
let db: NodePgDatabase;
let pool: Pool;
const webUser = `adv14_web_${randomBytes(4).toString('hex')}`;

async function addNote({ text, job }: { text: string; job: number }) {
  const id = await db.transaction(async (tx) => {
    await tx.execute(sql.raw(`SET LOCAL ROLE ${webUser}`));
    const { rows } = await tx.execute<{ id: number }>(
      sql`INSERT INTO notes (text) VALUES (${text}) RETURNING id`,
    );
    return rows[0].id;
  });
  await db.transaction(async (tx) => {
    // The step before its job: the foreign key is checked at this transaction's COMMIT.
    await tx.execute(sql`INSERT INTO internal.job_steps (job_id) VALUES (${job})`);
    await tx.execute(sql`INSERT INTO internal.jobs (id) VALUES (${job})`);
  });
  return { id, text };
}

@Controller()
class NotesController {
  @Post('plain')
  plain(@Body() body: { text: string; job: number }) {
    return addNote(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { text: string; job: number }) {
    return addNote(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

describe('adversary 14: constraints of a schema the narrowed role cannot use stay immediate after a nested COMMIT', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv14_deferred_other_schema', {
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

  const rows = async (text: string, job: number) => ({
    notes: (await fixture.admin.query('SELECT 1 FROM notes WHERE text = $1', [text])).rows.length,
    jobs: (await fixture.admin.query('SELECT 1 FROM internal.jobs WHERE id = $1', [job])).rows
      .length,
  });

  const post = (path: string, text: string, job: number, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ text, job });
  };

  it('without the library (no @Idempotent): 201 (control)', async () => {
    const answer = await post('/plain', 'a', 1);
    expect({ status: answer.status, ...(await rows('a', 1)) }).toEqual({
      status: 201,
      notes: 1,
      jobs: 1,
    });
  }, 20_000);

  it('under @Idempotent(): 201 once, the note and the job written once', async () => {
    const first = await post('/idempotent', 'b', 2, 'key-1');
    const retry = await post('/idempotent', 'b', 2, 'key-1');
    // Observed: { first: 500, retry: 500, notes: 0, jobs: 0 } (23503 at the step's INSERT).
    expect({ first: first.status, retry: retry.status, ...(await rows('b', 2)) }).toEqual({
      first: 201,
      retry: 201,
      notes: 1,
      jobs: 1,
    });
  }, 20_000);
});
