import { Body, Controller, Module, Post, Res, StreamableFile } from '@nestjs/common';
import { request as httpRequest } from 'node:http';
import { type AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type AdapterName } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

import { type ServerResponse } from 'node:http';

/** Express' response, as far as this app uses it (no @types/express here). */
type Response = ServerResponse & {
  status(code: number): Response;
  type(type: string): Response;
};

/**
 * What the app does (the pool seam, Express, `leaseMs: 600`, the heartbeat on as by default): an
 * idempotent export route writes an `exports` row and returns a `StreamableFile` of a report
 * produced chunk by chunk (5 chunks, 150 ms apart: a generated CSV, a PDF renderer). The
 * client (a mobile app going into a tunnel, a proxy's idle timeout) drops the connection
 * 300 ms into the download and retries later with the same key.
 *
 * What happens: the client's disconnect makes Nest's Express adapter destroy the file's
 * stream (`onResponseClose`), so the response is never ended: the
 * library's held `end()` never runs, the answer is never "written", and since the handler
 * settled with a value the heartbeat (run-owned.ts `settle(true)`, stopped only in the
 * finalizer once `answerWriting`) renews the lease for ever. The request's transaction stays
 * open on its pool connection (idle in transaction) for ever too. Every retry, seconds or
 * hours later, gets 409 key_in_progress, until the process restarts. No 'error' is emitted on
 * a stream destroyed without an error, so the stream-failure path is not taken either.
 *
 * What should happen (README / the brief's promise: "no hang that holds a key", "a correct
 * program never fails for ever because of the library"; options.md: the heartbeat renews
 * "until its answer is written", transactions.md: a stream that fails midway is rolled back,
 * nothing stored, lease released): a response the adapter gives up on is no answer; the
 * transaction is rolled back (or committed) and the key released or stored, so the retry runs
 * (or replays) instead of a 409 for ever.
 *
 * Why it matters: any idempotent download route leaks one pool connection held idle in
 * transaction (with the row locks of its write) and one key per client disconnect, for ever;
 * a handful of disconnects exhaust the pool. Likely: clients drop downloads all the time.
 * The same with an `@Res()` handler that pipes the report into the response (`pipe()`
 * unpipes when the response closes, and never ends it).
 *
 * Before the round-17 change (heartbeat stopped at settle) the key was at least taken over
 * once the lease ran out. (On Fastify the same disconnect stores a 500 for ever instead: see
 * adversary17-fastify-disconnect-mid-stream-500-stored.)
 */
let pool: Pool;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

function slowReport(item: string): Readable {
  let sent = 0;
  return new Readable({
    read() {
      if (sent === 5) {
        this.push(null);
        return;
      }
      sent += 1;
      setTimeout(() => this.push(`${item},line ${sent}\n`), 150);
    },
  });
}

@Controller()
class ExportsController {
  @Post('exports')
  @Idempotent()
  async create(@Body() body: { item: string }) {
    await pool.query('INSERT INTO exports (item) VALUES ($1)', [body.item]);
    return new StreamableFile(slowReport(body.item), { type: 'text/csv' });
  }

  /** The same report piped by hand on the response (`@Res()`), as many apps still do. */
  @Post('exports-piped')
  @Idempotent()
  async piped(@Body() body: { item: string }, @Res() res: Response) {
    await pool.query('INSERT INTO exports (item) VALUES ($1)', [body.item]);
    res.status(201).type('text/csv');
    slowReport(body.item).pipe(res);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, leaseMs: 600 }),
    }),
  ],
  controllers: [ExportsController],
})
class ExportsModule {}

/** Sends the request and drops the connection `afterMs` later, before the answer. */
function sendAndDrop(
  fixture: PoolApp,
  key: string,
  item: string,
  afterMs: number,
  path = '/exports',
) {
  const server = fixture.app.getHttpServer() as { address(): AddressInfo };
  return new Promise<void>((resolve) => {
    const req = httpRequest({
      host: '127.0.0.1',
      port: server.address().port,
      method: 'POST',
      path,
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
    });
    req.on('error', () => undefined);
    req.on('response', (res) => res.resume());
    req.end(JSON.stringify({ item }));
    setTimeout(() => {
      req.destroy();
      resolve();
    }, afterMs);
  });
}

describe.each<AdapterName>(['express'])(
  'adversary 17 (%s): a client that drops a streamed download leaves its key held',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv17_drop_stream_${adapter}`, {
        module: ExportsModule,
        adapter,
        max: 4,
        usePool: (started) => {
          pool = started;
          // For the clean-up only: the stuck client's backend is ended in afterAll.
          pool.on('connect', (client) => client.on('error', () => undefined));
        },
        setup: async (admin) => {
          await admin.query('CREATE TABLE exports (id serial PRIMARY KEY, item text NOT NULL)');
        },
      });
      await fixture.app.listen(0, '127.0.0.1');
    }, 60_000);

    afterAll(async () => {
      if (!fixture) return;
      // The stuck request holds its pool client for ever (pool.end() would wait for it):
      // its backend is ended, then the database dropped whatever the pool does.
      await fixture.app.close();
      await fixture.admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE datname = current_database() AND state = 'idle in transaction'`,
      );
      await Promise.race([fixture.close(), sleep(5000)]);
      await fixture.admin.end().catch(() => undefined);
      await fixture.database.drop().catch(() => undefined);
    }, 30_000);

    const send = (key: string, item: string) =>
      request(fixture.app.getHttpServer())
        .post('/exports')
        .set('Idempotency-Key', key)
        .buffer(true)
        .parse((res, done) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () => done(null, Buffer.concat(chunks).toString()));
        })
        .send({ item });

    const idleInTransaction = async () =>
      (
        await fixture.admin.query(
          `SELECT count(*)::int AS n FROM pg_stat_activity
            WHERE datname = current_database() AND state = 'idle in transaction'`,
        )
      ).rows[0].n as number;

    it('the download read to its end: stored, the retry replays it (control)', async () => {
      const first = await send('key-whole', 'whole');
      const retry = await send('key-whole', 'whole');
      expect({ status: first.status, body: first.body }).toEqual({
        status: 201,
        body: 'whole,line 1\nwhole,line 2\nwhole,line 3\nwhole,line 4\nwhole,line 5\n',
      });
      expect({ status: retry.status, body: retry.body }).toEqual({
        status: 201,
        body: first.body,
      });
    }, 20_000);

    it('the client drops mid-download: its retry later is not refused with 409 for ever', async () => {
      await sendAndDrop(fixture, 'key-dropped', 'dropped', 300);
      // Long past the lease (600 ms) and the stream's own end (750 ms).
      await sleep(3000);
      const retry = await send('key-dropped', 'dropped');
      const lingering = await idleInTransaction();
      // Observed: retry 409 (key_in_progress, the heartbeat renews the dead request's lease),
      // one session idle in transaction.
      expect({ retry: retry.status, lingering }).toEqual({ retry: 201, lingering: 0 });
    }, 20_000);

    it('the same with @Res() and pipe(): the retry later is not refused with 409 for ever', async () => {
      await sendAndDrop(fixture, 'key-piped', 'piped', 300, '/exports-piped');
      await sleep(3000);
      const retry = await request(fixture.app.getHttpServer())
        .post('/exports-piped')
        .set('Idempotency-Key', 'key-piped')
        .send({ item: 'piped' });
      // Observed: 409 key_in_progress.
      expect(retry.status).toBe(201);
    }, 20_000);
  },
);
