import { Body, Controller, Module, Post } from '@nestjs/common';
import { sql } from 'drizzle-orm';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { Client, Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { adminUrl } from '../../support/database.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (Drizzle on the pool given to the library, the Supabase row-level-security
 * recipe docs/guides/transactions.md names: the pool logs in as `authenticator`, a NOINHERIT
 * role granted `authenticated`; each unit of work is a Drizzle transaction that sets the JWT's
 * claim with `set_config(…, true)` and `SET LOCAL ROLE authenticated`): imports a user's notes
 * by staging them in a temporary table `ON COMMIT DROP` (or, made once per session with
 * `IF NOT EXISTS`, `ON COMMIT DELETE ROWS`), then `INSERT … SELECT` into the real table. The
 * temporary table is made under `authenticated`, which owns it. PostgreSQL's COMMIT drops
 * or empties it whoever owns it (no privilege check): without the library, 201.
 *
 * What happens: after the nested transaction's RELEASE the library puts the role back to
 * `authenticator` first (restoreNestedState) and only then sends its `DROP TABLE … CASCADE` /
 * `TRUNCATE`, now as `authenticator`, which does not inherit `authenticated`'s rights:
 * 42501 "must be owner of table note_stage" / "permission denied for table note_stage_e".
 * The nested COMMIT fails: 500, stored and replayed, the notes never imported.
 *
 * What should happen: as PostgreSQL's COMMIT: the tables ended whatever role made them (end
 * them before the role is put back); 201 once, the notes imported once.
 *
 * Why it matters: `SET LOCAL ROLE` in a Drizzle transaction is the recipe the guide endorses,
 * and a NOINHERIT login role is how Supabase (and PostgREST-style setups) are configured; any
 * temporary table its code makes there fails every such request.
 */
const suffix = `${process.pid % 100000}`;
const LOGIN = `adv12_authenticator_${suffix}`;
const AUTHED = `adv12_authenticated_${suffix}`;

let db: NodePgDatabase;
let pool: Pool;

type Import = { owner: string; how: 'dropped' | 'emptied'; notes: string[] };

async function importNotes({ owner, how, notes }: Import) {
  const stage = how === 'dropped' ? 'note_stage' : 'note_stage_e';
  await db
    .transaction(async (tx) => {
      await tx.execute(sql`SELECT set_config('request.jwt.claim.sub', ${owner}, true)`);
      await tx.execute(sql.raw(`SET LOCAL ROLE ${AUTHED}`));
      if (how === 'dropped') {
        await tx.execute(sql`CREATE TEMP TABLE note_stage (body text NOT NULL) ON COMMIT DROP`);
      } else {
        await tx.execute(
          sql`CREATE TEMP TABLE IF NOT EXISTS note_stage_e (body text NOT NULL) ON COMMIT DELETE ROWS`,
        );
      }
      for (const body of notes) {
        await tx.execute(sql`INSERT INTO ${sql.identifier(stage)} VALUES (${body})`);
      }
      await tx.execute(
        sql`INSERT INTO notes (owner, body)
          SELECT current_setting('request.jwt.claim.sub'), body FROM ${sql.identifier(stage)}`,
      );
    })
    .catch((error: unknown) => {
      if (process.env.ADV_DEBUG) console.log((error as { cause?: unknown }).cause ?? error);
      throw error;
    });
  return { owner, imported: notes.length };
}

@Controller()
class NotesController {
  @Post('plain')
  plain(@Body() body: Import) {
    return importNotes(body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: Import) {
    return importNotes(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [NotesController],
})
class NotesModule {}

async function asServer(text: string) {
  const server = new Client({ connectionString: adminUrl() });
  await server.connect();
  try {
    await server.query(text);
  } finally {
    await server.end();
  }
}

describe('adversary 12: a temporary table made under SET LOCAL ROLE is ended after the role is put back', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    await asServer(`DROP ROLE IF EXISTS ${LOGIN}; DROP ROLE IF EXISTS ${AUTHED};
      CREATE ROLE ${AUTHED} NOLOGIN; CREATE ROLE ${LOGIN} LOGIN NOINHERIT;
      GRANT ${AUTHED} TO ${LOGIN}`);
    let url = '';
    fixture = await startPoolApp('adv12_temp_set_role', {
      module: NotesModule,
      usePool: () => {
        const login = new URL(url);
        login.username = LOGIN;
        pool = new Pool({ connectionString: login.toString(), max: 2 });
        pool.on('error', () => undefined);
        db = drizzle(pool);
      },
      setup: async (admin) => {
        url = `postgres://${admin.user ?? 'postgres'}@${admin.host}:${admin.port}/${admin.database}`;
        await admin.query(`
          CREATE TABLE notes (id serial PRIMARY KEY, owner text NOT NULL, body text NOT NULL);
          GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO ${LOGIN};
          GRANT USAGE ON ALL SEQUENCES IN SCHEMA public TO ${LOGIN};
          GRANT INSERT ON notes TO ${AUTHED};
          GRANT USAGE ON SEQUENCE notes_id_seq TO ${AUTHED};`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
    await pool?.end().catch(() => undefined);
    await asServer(`DROP ROLE IF EXISTS ${LOGIN}; DROP ROLE IF EXISTS ${AUTHED}`);
  });

  const post = (path: string, body: Import, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send(body);
  };

  const notesOf = async (owner: string) => {
    const { rows } = await fixture.admin.query<{ body: string }>(
      'SELECT body FROM notes WHERE owner = $1 ORDER BY body',
      [owner],
    );
    return rows.map((row) => row.body);
  };

  it.each(['dropped', 'emptied'] as const)(
    'without the library (no @Idempotent), %s: 201, the notes imported (control)',
    async (how) => {
      const answer = await post('/plain', { owner: `plain-${how}`, how, notes: ['a', 'b'] });
      expect(answer.status).toBe(201);
      expect(await notesOf(`plain-${how}`)).toEqual(['a', 'b']);
    },
    20_000,
  );

  it.each(['dropped', 'emptied'] as const)(
    'under @Idempotent(), %s: 201 once, the notes imported once',
    async (how) => {
      const body: Import = { owner: `user-${how}`, how, notes: ['a', 'b'] };
      const answers: { status: number; body: unknown }[] = [];
      for (let attempt = 0; attempt < 3; attempt++) {
        const answer = await post('/idempotent', body, `key-${how}`);
        answers.push({ status: answer.status, body: answer.body });
        if (answer.status < 500) break;
      }
      expect({ answers, notes: await notesOf(`user-${how}`) }).toEqual({
        answers: [{ status: 201, body: { owner: `user-${how}`, imported: 2 } }],
        notes: ['a', 'b'],
      });
    },
    20_000,
  );
});
