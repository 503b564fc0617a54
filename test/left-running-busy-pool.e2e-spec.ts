import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

/**
 * Work a handler leaves running (a statement it starts and does not await) that reaches the
 * pool while the request's commit is under way waits for that commit, then runs on its own:
 * and it waits for a connection as it would without the library, in the pool's queue, not
 * under the library's `databaseTimeoutMs`. Found by the fuzzer (a crowd of RabbitMQ deliveries
 * keeping a small pool busy): the left-running write failed with "waiting for a connection: no
 * answer from PostgreSQL within 3000 ms", where the app's pool would have run it a moment
 * later. The commit is made slow here by a deferred trigger (its work runs at COMMIT), and the
 * pool (two connections) is kept busy by other callers of the app's while it ends.
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let leftRunning: Promise<unknown> | undefined;

@Controller()
class NotesController {
  @Post('notes')
  @Idempotent()
  async create(@Body() body: { text: string }) {
    await pool.query('INSERT INTO notes (text) VALUES ($1)', [body.text]);
    // Started during the commit (slowed by the deferred trigger), never awaited by the handler.
    leftRunning = sleep(150).then(() =>
      pool.query('INSERT INTO notes_later (text) VALUES ($1)', [body.text]),
    );
    return { text: body.text };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 600 }),
    }),
  ],
  controllers: [NotesController],
})
class NotesModule {}

describe('work left running after the answer, on a busy pool', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('left_running_busy_pool', {
      module: NotesModule,
      max: 2,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(`
          CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL);
          CREATE TABLE notes_later (id serial PRIMARY KEY, text text NOT NULL);
          CREATE FUNCTION slow_commit() RETURNS trigger LANGUAGE plpgsql AS
            $$ BEGIN PERFORM pg_sleep(0.4); RETURN NULL; END $$;
          CREATE CONSTRAINT TRIGGER notes_slow_commit AFTER INSERT ON notes
            DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow_commit();
        `);
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  it('lands once the pool has a connection, past the library deadline', async () => {
    const answer = request(fixture.app.getHttpServer())
      .post('/notes')
      .set('Idempotency-Key', 'note-1')
      .send({ text: 'hello' })
      .then((response) => response);
    // The pool's other connection, and then the request's once it commits, go to other work
    // of the app's (queued before the left-running write asks): it waits about a second.
    await sleep(50);
    const busy = [pool.query('SELECT pg_sleep(1.2)')];
    await sleep(150);
    busy.push(pool.query('SELECT pg_sleep(1.2)'));
    expect((await answer).status).toBe(201);
    await Promise.all(busy);
    const outcome = await leftRunning!.then(
      () => 'landed',
      (error: unknown) => String(error),
    );
    const { rows } = await fixture.admin.query<{ text: string }>('SELECT text FROM notes_later');
    expect({ outcome, rows }).toEqual({ outcome: 'landed', rows: [{ text: 'hello' }] });
  }, 30_000);
});
