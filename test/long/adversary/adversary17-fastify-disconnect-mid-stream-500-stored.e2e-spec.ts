import { Body, Controller, Module, Post, StreamableFile } from '@nestjs/common';
import { request as httpRequest } from 'node:http';
import { type AddressInfo } from 'node:net';
import { Readable } from 'node:stream';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type AdapterName } from '../../support/bootstrap.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * What the app does (the pool seam, Fastify, `leaseMs: 600`, defaults otherwise): an
 * idempotent export route writes an `exports` row and returns a `StreamableFile` of a report
 * produced chunk by chunk (5 chunks, 150 ms apart: a generated CSV, a PDF renderer). The
 * client drops the connection 300 ms into the download (a mobile app going into a tunnel, a
 * proxy's idle timeout) and retries later with the same key.
 *
 * What happens: Nest's Fastify adapter sees its stream end early (ERR_STREAM_PREMATURE_CLOSE)
 * and its exception handler answers 500 into the held response. The library reads that as
 * "the value the handler returned could not be written" (handler-result.ts isUnwrittenValue:
 * a 5xx after a value the handler did not choose) and STORES the 500 as the key's final answer
 * ("its effects are rolled back, the answer stored"), its body the first CSV chunk followed by
 * the 500's JSON. Every retry of that key, for ever, replays that 500; the export is never
 * made.
 *
 * What should happen (the promise: "a correct program never fails for ever because of the
 * library"; transactions.md: "the stream the handler returned fails midway: 503 retry_later,
 * rolled back, nothing stored, lease released; the retry runs it again"): a download the
 * client abandoned is no answer to store; the retry runs the export (201, whole file).
 *
 * Why it matters: a routine disconnect turns an idempotency key into a permanent 500; the
 * client's retry logic (same key, as the docs ask) can never succeed. Likely on any idempotent
 * download route on Fastify. (On Express the same disconnect holds the key for ever instead:
 * see adversary17-disconnect-mid-stream-key-held.)
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
function sendAndDrop(fixture: PoolApp, key: string, item: string, afterMs: number) {
  const server = fixture.app.getHttpServer() as { address(): AddressInfo };
  return new Promise<void>((resolve) => {
    const req = httpRequest({
      host: '127.0.0.1',
      port: server.address().port,
      method: 'POST',
      path: '/exports',
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

describe.each<AdapterName>(['fastify'])(
  'adversary 17 (%s): a client that drops a streamed download gets a 500 stored for ever',
  (adapter) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv17_drop_stream_500_${adapter}`, {
        module: ExportsModule,
        adapter,
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE exports (id serial PRIMARY KEY, item text NOT NULL)');
        },
      });
      await fixture.app.listen(0, '127.0.0.1');
    }, 60_000);

    afterAll(() => fixture?.close(), 30_000);

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

    const rows = async (item: string) =>
      (await fixture.admin.query('SELECT 1 FROM exports WHERE item = $1', [item])).rows.length;

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

    it('the client drops mid-download: its retry later runs the export', async () => {
      await sendAndDrop(fixture, 'key-dropped', 'dropped', 300);
      await sleep(1500);
      const retry = await send('key-dropped', 'dropped');
      const again = await send('key-dropped', 'dropped');
      // Observed: both 500, body 'dropped,line 1\n{"statusCode":500,...}', no export row.
      expect({
        retry: retry.status,
        again: again.status,
        body: again.body,
        rows: await rows('dropped'),
      }).toEqual({
        retry: 201,
        again: 201,
        body: 'dropped,line 1\ndropped,line 2\ndropped,line 3\ndropped,line 4\ndropped,line 5\n',
        rows: 1,
      });
    }, 20_000);
  },
);
