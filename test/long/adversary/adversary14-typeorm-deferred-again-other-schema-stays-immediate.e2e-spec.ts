import { randomBytes } from 'node:crypto';
import { Body, Controller, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { adminUrl } from '../../support/database.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * What the app does (TypeORM, docs/guides/transactions.md's row-level-security recipe): it
 * logs in as the database's owner. A request writes the tenant's note in
 * `dataSource.transaction()` under `SET LOCAL ROLE web_user` (granted `public`'s tables,
 * nothing in `internal`), then, as the owner, records a job in a second
 * `dataSource.transaction()`: the job's step first, then the job, under the
 * `DEFERRABLE INITIALLY DEFERRED` foreign key of `internal.job_steps`. Without the library: 201.
 *
 * What happens: the first nested COMMIT's check (RUN_DEFERRED_AS_COMMIT, before the RELEASE,
 * still as `web_user`) runs `SET CONSTRAINTS ALL IMMEDIATE` and names DEFERRED again only the
 * constraints of schemas `web_user` may use: `internal`'s foreign key stays immediate for the
 * rest of the request. The owner's second transaction meets it at once: 23503 on the step's
 * INSERT, 500, on every retry.
 *
 * What should happen: 201 once, the note and the job written once, as without the library.
 *
 * Why it matters: the TypeORM face of adversary14-deferred-again-other-schema-stays-immediate:
 * the schemas are chosen by the role the nested transaction narrowed to, not the role the
 * request goes on with.
 */
const webUser = `adv14_web_${randomBytes(4).toString('hex')}`;

async function addNote(dataSource: DataSource, { text, job }: { text: string; job: number }) {
  await dataSource.transaction(async (manager) => {
    await manager.query(`SET LOCAL ROLE ${webUser}`);
    await manager.query('INSERT INTO notes (text) VALUES ($1)', [text]);
  });
  await dataSource.transaction(async (manager) => {
    await manager.query('INSERT INTO internal.job_steps (job_id) VALUES ($1)', [job]);
    await manager.query('INSERT INTO internal.jobs (id) VALUES ($1)', [job]);
  });
  return { text, job };
}

@Controller()
class NotesController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('plain')
  plain(@Body() body: { text: string; job: number }) {
    return addNote(this.dataSource, body);
  }

  @Post('idempotent')
  @Idempotent()
  idempotent(@Body() body: { text: string; job: number }) {
    return addNote(this.dataSource, body);
  }
}

describe('adversary 14: TypeORM, constraints of a schema the narrowed role cannot use stay immediate after a nested COMMIT', () => {
  let typeorm: TypeormApp;

  beforeAll(async () => {
    typeorm = await startTypeormApp('adv14_typeorm_other_schema', {
      entities: [],
      controllers: [NotesController],
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
    await typeorm?.close();
    const root = new Client({ connectionString: adminUrl() });
    await root.connect();
    await root.query(`DROP ROLE IF EXISTS ${webUser}`);
    await root.end();
  });

  const rows = async (text: string, job: number) => ({
    notes: (await typeorm.admin.query('SELECT 1 FROM notes WHERE text = $1', [text])).rows.length,
    jobs: (await typeorm.admin.query('SELECT 1 FROM internal.jobs WHERE id = $1', [job])).rows
      .length,
  });

  const post = (path: string, text: string, job: number, key?: string) => {
    const call = request(typeorm.app.getHttpServer()).post(path);
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
