import { Body, Controller, type INestApplication, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource, type EntityManager } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 2 (issue 27): the fix for a data layer's nested `SET LOCAL ROLE` (its role,
 * session authorization and search path put back at the outermost nested COMMIT) is on the
 * pool seam only (lib/data-layers/pool-transaction.ts). On TypeORM the request's transaction is
 * a query runner (lib/data-layers/lazy-transaction.ts) whose `startTransaction()` is a
 * SAVEPOINT and whose `commitTransaction()` a RELEASE, with nothing put back: the RLS recipe
 * `dataSource.transaction(m => { SET LOCAL ROLE …; insert })` leaks its role into the
 * handler's later statements, which run as the restricted role. Row-level security then hides
 * the service's row in silence: 201 stored and replayed, the counter not moved (without
 * `@Idempotent()`: 1). The same in a query runner's own startTransaction/commitTransaction.
 */
let role: string;

async function handle(dataSource: DataSource, body: { note: string; via: string }) {
  const work = async (manager: EntityManager) => {
    await manager.query(`SET LOCAL ROLE ${role}`);
    await manager.query(`SELECT set_config('request.user', 'alice', true)`);
    await manager.query(`INSERT INTO notes (owner, body) VALUES ('alice', $1)`, [body.note]);
  };
  if (body.via === 'transaction') {
    await dataSource.transaction(work);
  } else {
    const runner = dataSource.createQueryRunner();
    await runner.connect();
    try {
      await runner.startTransaction();
      await work(runner.manager);
      await runner.commitTransaction();
    } finally {
      await runner.release();
    }
  }
  // The service's own work, as the DataSource's role (which bypasses row-level security).
  const [, counted] = (await dataSource.query(
    'UPDATE stats SET notes = notes + 1 WHERE id = 1',
  )) as [unknown, number];
  const [who] = (await dataSource.query('SELECT current_user AS who')) as { who: string }[];
  return { note: body.note, counted, who: who.who === role ? 'restricted' : 'owner' };
}

@Controller()
class NotesController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Post('notes')
  @Idempotent()
  idempotent(@Body() body: { note: string; via: string }) {
    return handle(this.dataSource, body);
  }

  @Post('plain-notes')
  plain(@Body() body: { note: string; via: string }) {
    return handle(this.dataSource, body);
  }
}

describe('adversary 2: SET LOCAL ROLE in a TypeORM transaction nested in the request’s', () => {
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv2_typeorm_role', {
      controllers: [NotesController],
      setup: async (admin, database) => {
        role = `adv2_authenticated_${database.name.slice(-8)}`;
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
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(async () => {
    await fixture?.close();
    const cluster = new Client({ connectionString: process.env.TEST_DATABASE_URL });
    await cluster.connect();
    await cluster.query(`DROP ROLE IF EXISTS ${role}`).catch(() => undefined);
    await cluster.end();
  });

  const counter = async () =>
    (await admin.query<{ notes: number }>('SELECT notes FROM stats')).rows[0].notes;

  it.each(['transaction', 'runner'])(
    'ends with it (%s): the service statement after it runs as the DataSource’s role, 201, the counter moved once',
    async (via) => {
      // The control: without @Idempotent() the statement after it runs as the owner.
      const plainBefore = await counter();
      const plain = await request(app.getHttpServer())
        .post('/plain-notes')
        .send({ note: `plain ${via}`, via });
      expect({
        status: plain.status,
        body: plain.body as unknown,
        counted: (await counter()) - plainBefore,
      }).toEqual({
        status: 201,
        body: { note: `plain ${via}`, counted: 1, who: 'owner' },
        counted: 1,
      });
      const before = await counter();
      const send = () =>
        request(app.getHttpServer())
          .post('/notes')
          .set('Idempotency-Key', `note-${via}`)
          .send({ note: `hello ${via}`, via });
      const answer = await send();
      const replay = await send();
      expect({
        status: answer.status,
        body: answer.body as unknown,
        replayed: replay.text === answer.text,
        counted: (await counter()) - before,
      }).toEqual({
        status: 201,
        body: { note: `hello ${via}`, counted: 1, who: 'owner' },
        replayed: true,
        counted: 1,
      });
    },
  );
});
