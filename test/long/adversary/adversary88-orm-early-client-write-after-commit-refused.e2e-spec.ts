/**
 * Adversary 88 (orm): the node-postgres client a query runner hands out before the request's
 * first write (`const client = await qr.connect()`, TypeORM's manual recipe, taken early to
 * use pg's own API), kept by work the handler starts, and written through after the answer.
 * Under `@Idempotent()` that client is the library's stand-in for a connection not opened yet
 * (nothing of the request was sent on it): after the end its `query()` tries to open the
 * request's connection, which is refused with `TransactionEndedError`, whose message says
 * "The idempotent request’s transaction was rolled back", though the request committed and
 * its 201 is stored. The write never runs. Without the library the client is a pooled
 * connection and the write lands; and a client taken after the request's first write (a
 * guarded view of its connection) has its write run apart once the answer committed, as
 * the guide says.
 *
 * User code:
 *
 *   const qr = this.dataSource.createQueryRunner();
 *   const client = (await qr.connect()) as PoolClient;     // before any write
 *   void sleep(50).then(async () => {                       // a follow-up, not awaited
 *     try { await client.query('INSERT INTO … (tag) VALUES ($1)', [tag]); }
 *     finally { await qr.release(); }
 *   });
 *   return { tag };
 *
 * Code path: lib/data-layers/lazy-transaction.ts `unopened`: the stand-in client's `query`
 * (not a plain read) → `open()` → `this.open(runner)` → request-transaction.ts `connection()`:
 * `if (this.ended) return Promise.reject(new TransactionEndedError())`, whatever the outcome;
 * `clientOf`'s `if (this.ended) return send()` hands it straight there. (A guarded client,
 * taken after the connection opened, goes to `sendNow`, which sends it apart once committed.)
 *
 * Docs quote: docs/guides/transactions.md, "Database work belongs before the answer": "So does
 * a runner or client it took while the request was open and uses past its end with no
 * transaction of its own open (…): from then on it is a runner or connection of its own. If
 * the request rolled back instead (…), it meets `TransactionEndedError`".
 *
 * Severity: high (a write of work the handler started is lost while its 201 is stored and
 * replayed; the error the app sees says the request rolled back, which it did not).
 *
 * Fails now (verified unskipped): outcome "TransactionEndedError: The idempotent request’s
 * transaction was rolled back: …", rows [] (expected 'ok', ['i1']). Controls pass: without
 * `@Idempotent()` (['c1']), and keyed with the client taken after a first write (['c2-a',
 * 'c2']: run apart).
 *
 * Suggested fix: the stand-in's `query()` after the end waits for the outcome (`afterEnd`)
 * and, committed, runs on a connection of its own (`sendAlone(args, true)`, as a guarded
 * client's does), refused only after a rollback.
 *
 * Fixed (session of 2026-12-06, third): the stand-in client's `query()` past the end no longer
 * opens the request's connection: it goes to `RequestTransaction.sentAfterEnd`
 * (lib/transaction/request-transaction.ts), which waits for the outcome (`apart`) and, once
 * committed, sends it on a connection of its own waited for as the app's pool waits (a cursor or
 * stream handed to that connection, given back once it ended), answered in the form it was sent
 * in (`answered`, now lib/transaction/answered.ts with a table-driven spec); refused with
 * `TransactionEndedError` only after a rollback. lib/data-layers/lazy-transaction.ts `unopened`.
 */
import { Body, Controller, type INestApplication, Injectable, Post } from '@nestjs/common';
import { InjectDataSource } from '@nestjs/typeorm';
import { type PoolClient } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
let later: Promise<unknown> | undefined;

@Injectable()
class FeedService {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  async record(tag: string, writeFirst: boolean) {
    if (writeFirst) {
      await this.dataSource.query('INSERT INTO adv88_early_client (tag) VALUES ($1)', [`${tag}-a`]);
    }
    const qr = this.dataSource.createQueryRunner();
    const client = (await qr.connect()) as PoolClient;
    later = sleep(50).then(async () => {
      try {
        await client.query('INSERT INTO adv88_early_client (tag) VALUES ($1)', [tag]);
        return 'ok';
      } finally {
        await qr.release();
      }
    });
    return { tag };
  }
}

@Controller()
class FeedController {
  constructor(private readonly feed: FeedService) {}

  @Post('plain')
  plain(@Body() body: { tag: string }) {
    return this.feed.record(body.tag, false);
  }

  @Post('idem')
  @Idempotent()
  idem(@Body() body: { tag: string }) {
    return this.feed.record(body.tag, false);
  }

  @Post('idem-after-write')
  @Idempotent()
  idemAfterWrite(@Body() body: { tag: string }) {
    return this.feed.record(body.tag, true);
  }
}

describe('adversary 88 orm: a pg client taken before the first write, written through after the answer', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv88_orm_early_client', {
      controllers: [FeedController],
      providers: [FeedService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv88_early_client (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'plain' | 'idem' | 'idem-after-write', tag: string) {
    later = undefined;
    const answer = await request(app.getHttpServer())
      .post(`/${route}`)
      .set('Idempotency-Key', `key-${tag}`)
      .send({ tag });
    const outcome = await later!.then(
      (value) => value,
      (error: Error) => `${error.name}: ${error.message}`,
    );
    const { rows } = await fixture.admin.query<{ tag: string }>(
      'SELECT tag FROM adv88_early_client WHERE tag LIKE $1 ORDER BY id',
      [`${tag}%`],
    );
    return { status: answer.status, outcome, rows: rows.map((row) => row.tag) };
  }

  it('control: without @Idempotent(), the client is a connection of the pool: the row lands', async () => {
    expect(await scenario('plain', 'c1')).toEqual({ status: 201, outcome: 'ok', rows: ['c1'] });
  }, 30_000);

  it('control: keyed, the client taken after a first write: its write runs apart once committed', async () => {
    expect(await scenario('idem-after-write', 'c2')).toEqual({
      status: 201,
      outcome: 'ok',
      rows: ['c2-a', 'c2'],
    });
  }, 30_000);

  it('keyed, the client taken before any write: its write runs on its own once the answer committed', async () => {
    expect(await scenario('idem', 'i1')).toEqual({ status: 201, outcome: 'ok', rows: ['i1'] });
  }, 30_000);
});
