/**
 * Adversary 77: a handler that LISTENs on a client of the pool and waits for a notification,
 * with node-postgres' documented `client.on('error', …)` to hear its connection die. The
 * listening connection is terminated (a failover, `pg_terminate_backend`, an idle-session kill).
 * Without the library the client emits 'error' at once and the handler stops waiting. Keyed,
 * the LISTEN ran on the library's connection of its own (`ViewListener`), whose 'error' is
 * never told on the client the handler holds: the handler hears nothing and waits out its own
 * timeout (8 s here); a handler that waits without one hangs for ever, the heartbeat holding the
 * key (409 `key_in_progress` to every retry while the process lives).
 *
 *   const client = await pool.connect();
 *   const lost = once(client, 'error');                  // node-postgres: connection lost
 *   const heard = once(client, 'notification');
 *   await client.query('LISTEN job_done');
 *   await Promise.race([heard, lost]);                   // keyed: neither, ever
 *
 * Why: lib/data-layers/view-listener.ts `forwardEvents` forwards only 'notification' and
 * 'notice' from the listener connection to the view (`FORWARDED`); the connection's 'error'
 * goes to the library's own `listenForErrors` (lib/connection/deadline.ts `acquire`), which
 * only marks it. The view (the client the handler holds) never emits 'error', and the dead
 * listener is given back only at `release()`, which the waiting handler never reaches.
 *
 * Docs (docs/guides/data-layers.md): "`LISTEN` and `UNLISTEN` on such a client run on a
 * connection of its own from the pool, as its client's would, whose notifications (and
 * notices) are emitted on the client: the handler hears a `NOTIFY` while it runs." and the
 * promise that nothing hangs holding a key. node-postgres' Client docs: "'error' … emitted when
 * the connection to the server is lost" - on a listening (idle) client, the only way its code
 * learns of it.
 *
 * Control: without `@Idempotent()`: the handler sees 'error' (outcome `lost`) within a second
 * or two of the terminate.
 *
 * Severity: medium (the handler waits out its own timeout and answers that; without one, a
 * hang holding the key: high).
 *
 * Fails now: keyed: outcome `timeout` after 8 s, not `lost`.
 *
 * Suggested fix: forward the listener connection's 'error' (and 'end') to the view as well, as
 * its client's own would be emitted, and give the dead connection back to the pool with the
 * error (`release(error)`) at once.
 *
 * Fixed: `ViewListener` (lib/data-layers/view-listener.ts) hears its connection's 'error':
 * it emits it on the view (when something listens, as node-postgres' client would), then 'end',
 * gives the dead connection back with the error at once, and fails later LISTENs with it;
 * `JoinedClient.release(error)` with that error (pool-transaction.ts) leaves the request's
 * connection be. Unit: lib/data-layers/view-listener.spec.ts.
 */
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const POOL = Symbol('POOL');
let pool: Pool;

/** Told when the handler is listening (the test then terminates the listening backend). */
const listening = new Map<string, () => void>();
const listeningOf = (tag: string) =>
  new Promise<void>((resolve) => {
    listening.set(tag, resolve);
  });

async function work(pool: Pool, { tag }: { tag: string }) {
  const client = await pool.connect();
  let timer: NodeJS.Timeout | undefined;
  let lostError: Error | undefined;
  try {
    const outcome = new Promise<'notification' | 'lost' | 'timeout'>((resolve) => {
      client.on('notification', () => resolve('notification'));
      client.on('error', (error: Error) => {
        lostError = error;
        resolve('lost');
      });
      timer = setTimeout(() => resolve('timeout'), 8_000);
    });
    await client.query(`LISTEN adv77_lost_${tag.replace(/\W/g, '_')}`);
    listening.get(tag)?.();
    return { tag, outcome: await outcome };
  } finally {
    clearTimeout(timer);
    client.release(lostError);
  }
}

@Controller()
class JobsController {
  constructor(@Inject(POOL) private readonly pool: Pool) {}

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: { tag: string }) {
    return work(this.pool, body);
  }

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return work(this.pool, body);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [JobsController],
  providers: [{ provide: POOL, useFactory: () => pool }],
})
class JobsModule {}

describe("adversary 77: a LISTENing client's connection terminated", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv77_listen_lost', {
      module: JobsModule,
      max: 4,
      usePool: (started) => {
        pool = started;
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  /** Runs the request; once its handler listens, terminates the backend that listens. */
  const run = async (path: string, tag: string) => {
    const ready = listeningOf(tag);
    const call = request(fixture.app.getHttpServer()).post(path).timeout(30_000);
    if (path === '/keyed') call.set('Idempotency-Key', tag);
    // Started now (supertest sends on `then`), answered once the backend is gone.
    const answering = call.send({ tag }).then((answer) => answer);
    await ready;
    const channel = `adv77_lost_${tag.replace(/\W/g, '_')}`;
    const { rows } = await fixture.admin.query<{ killed: boolean }>(
      `SELECT pg_terminate_backend(pid) AS killed FROM pg_stat_activity
        WHERE datname = current_database() AND query = $1`,
      [`LISTEN ${channel}`],
    );
    const answer = await answering;
    return { killed: rows.length, status: answer.status, body: answer.body as unknown };
  };

  it("control: without @Idempotent(): the client emits 'error', the handler stops waiting", async () => {
    const tag = 'plain-lost';
    expect(await run('/plain', tag)).toEqual({
      killed: 1,
      status: 201,
      body: { tag, outcome: 'lost' },
    });
  }, 30_000);

  it("keyed: the client emits 'error', as without the library", async () => {
    const tag = 'keyed-lost';
    expect(await run('/keyed', tag)).toEqual({
      killed: 1,
      status: 201,
      body: { tag, outcome: 'lost' },
    });
  }, 30_000);
});
