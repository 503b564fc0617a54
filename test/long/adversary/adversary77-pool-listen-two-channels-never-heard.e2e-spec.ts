/**
 * Adversary 77: a handler that listens on two channels in one text (`LISTEN job_done; LISTEN
 * job_failed`) on a client of the pool, asks a worker to do a job, and waits for its
 * notification. Keyed, it never hears it: the two LISTENs are sent on the request's connection,
 * inside its transaction, where PostgreSQL starts listening only at COMMIT. The handler waits
 * out its own 5 s timeout and answers 500 (with no timeout of its own it hangs, the heartbeat
 * holding the key while the process lives). Without the library, or with the two LISTENs sent
 * one per query: 201 and the worker's payload.
 *
 *   const client = await pool.connect();
 *   const heard = once(client, 'notification');
 *   await client.query('LISTEN job_done; LISTEN job_failed');
 *   await worker.run(job);                       // the worker NOTIFYs job_done when done
 *   const [message] = await heard;
 *   await client.query('UNLISTEN *');
 *   client.release();
 *
 * Why: `JoinedClient.query` (lib/data-layers/pool-transaction.ts) sends a LISTEN to the view's
 * connection of its own (`ViewListener`, lib/data-layers/view-listener.ts) only when
 * `isListenControl` matches, whose regex `^\s*(?:LISTEN|UNLISTEN)\s+[^;]+;?\s*$` takes one
 * statement alone. A text of two LISTENs (or a LISTEN after a leading `--` comment) falls through
 * to `PoolTransaction.statement`, on the request's connection, in its transaction: LISTEN is
 * transactional, heard only after the request commits (after the answer), and the request's
 * pooled connection then listens for whoever takes it next (the library's `UNLISTEN *` went to
 * the listener connection, not to it).
 *
 * Docs (docs/guides/data-layers.md): "`LISTEN` and `UNLISTEN` on such a client run on a
 * connection of its own from the pool, as its client's would, whose notifications (and
 * notices) are emitted on the client: the handler hears a `NOTIFY` while it runs." No word of
 * one statement per text.
 *
 * Control: without `@Idempotent()`: 201 with the payload. Keyed, one LISTEN per query: 201.
 *
 * Severity: medium (a false 500 on every try; without a timeout of the handler's, a hang
 * holding the key: high).
 *
 * Fails now: keyed, `LISTEN a; LISTEN b`: 500 after the handler's 5 s timeout, no note.
 *
 * Suggested fix: read the text's statements (`statementsOf`) and send a text whose every
 * statement is a LISTEN / UNLISTEN to the listener connection; refuse (a clear error) a text
 * that mixes them with other statements, rather than run them in the request's transaction.
 *
 * Fixed: `listenTextOf` (lib/data-layers/view-listener.ts) reads the text's statements with
 * the library's SQL parser: a text whose every statement is a LISTEN/UNLISTEN (two of them, a
 * leading comment) goes to the view's listener connection (`JoinedClient.query`,
 * pool-transaction.ts); one that mixes them with other statements is refused before anything is
 * sent (`ListenAmongStatementsRefusedError`, lib/transaction/seam-errors.ts). Unit:
 * lib/data-layers/view-listener.spec.ts.
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import pg, { type Notification, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;
let url: string;

type Body77 = { tag: string; onePerQuery?: boolean };

/** The worker: another process's connection that notifies when the job is done. */
async function runJob(tag: string): Promise<void> {
  const worker = new pg.Client({ connectionString: url });
  await worker.connect();
  try {
    await worker.query(`SELECT pg_notify('adv77_job_done', $1)`, [tag]);
  } finally {
    await worker.end();
  }
}

async function work(pool: Pool, { tag, onePerQuery }: Body77) {
  const client = await pool.connect();
  let timer: NodeJS.Timeout | undefined;
  try {
    const heard = new Promise<string | undefined>((resolve, reject) => {
      client.on('notification', (message: Notification) => {
        if (message.channel === 'adv77_job_done') resolve(message.payload);
      });
      timer = setTimeout(() => reject(new Error('no notification from the worker')), 5_000);
    });
    heard.catch(() => undefined);
    if (onePerQuery) {
      await client.query('LISTEN adv77_job_done');
      await client.query('LISTEN adv77_job_failed');
    } else {
      await client.query('LISTEN adv77_job_done; LISTEN adv77_job_failed');
    }
    await runJob(tag);
    const payload = await heard;
    await client.query('UNLISTEN *');
    await client.query('INSERT INTO adv77listen_notes (tag) VALUES ($1)', [tag]);
    return { tag, payload };
  } finally {
    clearTimeout(timer);
    client.release();
  }
}

@Controller()
class JobsController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body77) {
    return work(this.pool, body);
  }

  @Post('plain')
  plain(@Body() body: Body77) {
    return work(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [JobsController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class JobsModule {}

describe('adversary 77: two LISTENs in one text on a client of the pool', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv77_listen_two', {
      module: JobsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE adv77listen_notes (id serial PRIMARY KEY, tag text)');
      },
    });
    url = fixture.database.url;
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const notes = async (tag: string) =>
    Number(
      (
        await fixture.admin.query<{ count: string }>(
          'SELECT count(*) FROM adv77listen_notes WHERE tag = $1',
          [tag],
        )
      ).rows[0].count,
    );

  const post = (path: string, key: string | undefined, body: Body77) => {
    const call = request(fixture.app.getHttpServer()).post(path);
    if (key) call.set('Idempotency-Key', key);
    return call.send(body);
  };

  const outcome = async (answer: request.Response, tag: string) => ({
    status: answer.status,
    body: answer.body as unknown,
    notes: await notes(tag),
  });

  it('control: without @Idempotent(), two LISTENs in one text: 201, heard', async () => {
    const tag = 'plain-two';
    expect(await outcome(await post('/plain', undefined, { tag }), tag)).toEqual({
      status: 201,
      body: { tag, payload: tag },
      notes: 1,
    });
  }, 30_000);

  it('control: keyed, one LISTEN per query: 201, heard', async () => {
    const tag = 'keyed-one-per-query';
    expect(await outcome(await post('/keyed', tag, { tag, onePerQuery: true }), tag)).toEqual({
      status: 201,
      body: { tag, payload: tag },
      notes: 1,
    });
  }, 30_000);

  it('keyed, two LISTENs in one text: 201, heard, as without the library', async () => {
    const tag = 'keyed-two';
    expect(await outcome(await post('/keyed', tag, { tag }), tag)).toEqual({
      status: 201,
      body: { tag, payload: tag },
      notes: 1,
    });
  }, 30_000);
});
