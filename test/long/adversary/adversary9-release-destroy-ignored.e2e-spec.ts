import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What a user does (pg itself on the pool given to the library, docs/guides/data-layers.md):
 * a bulk step takes a client of its own with `pool.connect()`, gives it a session setting for
 * the job (`SET statement_timeout = '200ms'`: fail fast rather than hold the import), and
 * gives it back with `client.release(true)`, node-postgres' documented way to have the pool
 * destroy a client rather than hand its changed session to the next caller.
 *
 * What happens: inside an idempotent request `release(true)` is ignored (the view's
 * `release()` takes no argument), the `SET` commits with the request's transaction and stays
 * on the pooled connection: every later request on it (here the pool's one connection) runs
 * under a 200 ms statement timeout. A later request whose write takes about a second is
 * cancelled (57014) and answered 503 `database_transient`, on every retry, for as long as the
 * connection lives: a permanent failure answered "retry later", the key never done.
 *
 * What should happen: the client the handler asked to destroy does not hand its session to
 * later requests (without the library: both 201).
 */
let pool: Pool;

async function bulk(body: { id: string }) {
  const client = await pool.connect();
  try {
    await client.query(`SET statement_timeout = '200ms'`);
    await client.query('INSERT INTO imports (id) VALUES ($1)', [body.id]);
  } finally {
    // Destroy it: its session was changed for this job.
    client.release(true);
  }
  return { id: body.id };
}

async function slow(body: { id: string }) {
  await pool.query('INSERT INTO ledger (id) SELECT $1 FROM pg_sleep(1)', [body.id]);
  return { id: body.id };
}

@Controller()
class JobsController {
  @Post('plain/bulk')
  plainBulk(@Body() body: { id: string }) {
    return bulk(body);
  }

  @Post('plain/slow')
  plainSlow(@Body() body: { id: string }) {
    return slow(body);
  }

  @Post('bulk')
  @Idempotent()
  idempotentBulk(@Body() body: { id: string }) {
    return bulk(body);
  }

  @Post('slow')
  @Idempotent()
  idempotentSlow(@Body() body: { id: string }) {
    return slow(body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [JobsController],
})
class JobsModule {}

describe('adversary 9: release(true) of a joined client is ignored', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv9_release_destroy', {
      module: JobsModule,
      // One connection: every request meets the connection the one before gave back.
      max: 1,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE imports (id text PRIMARY KEY)');
        await admin.query('CREATE TABLE ledger (id text PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (path: string, id: string, key?: string) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    return (key ? call.set('Idempotency-Key', key) : call).send({ id });
  };

  it('without the library (no @Idempotent): both 201 (control)', async () => {
    expect((await post('/plain/bulk', 'plain-bulk')).status).toBe(201);
    expect((await post('/plain/slow', 'plain-slow')).status).toBe(201);
  }, 30_000);

  it('under @Idempotent(): the later slow request is 201, not 503 on every try', async () => {
    expect((await post('/bulk', 'bulk-1', 'bulk-key')).status).toBe(201);
    const answers: { status: number; code?: string }[] = [];
    for (let attempt = 0; attempt < 3; attempt++) {
      const answer = await post('/slow', 'slow-1', 'slow-key');
      answers.push({ status: answer.status, code: (answer.body as { code?: string }).code });
      if (answer.status < 500) break;
    }
    expect(answers).toEqual([{ status: 201, code: undefined }]);
  }, 30_000);
});
