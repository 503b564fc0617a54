/**
 * Adversary 88 (orm): a query runner made while the request was open (a listener the handler
 * started, TypeORM's manual recipe: `const qr = dataSource.createQueryRunner()` first, then
 * slow work, then `await qr.connect()`), used past the answer through the node-postgres client
 * `connect()` hands out (`const client = await qr.connect(); await client.query(…)`: pg's own
 * API, for what TypeORM does not wrap). Under `@Idempotent()` that `connect()`, reached after
 * the request committed, resolves `undefined`: the write fails with "TypeError: Cannot read
 * properties of undefined (reading 'query')" and never runs, while the request's 201 is stored
 * and replayed. Without the library the client is a pooled connection and the write lands; the
 * same runner's own `qr.query(…)` at that moment also lands (it runs apart).
 *
 * User code:
 *
 *   await this.dataSource.query('INSERT INTO … (tag) VALUES ($1)', [`${tag}-a`]);
 *   const qr = this.dataSource.createQueryRunner();      // a listener, started now
 *   void sleep(delay).then(async () => {
 *     try {
 *       const client = (await qr.connect()) as PoolClient;
 *       await client.query('INSERT INTO … (tag) VALUES ($1)', [`${tag}-b`]);
 *     } finally { await qr.release(); }
 *   });
 *   return { tag };
 *
 * Code path: lib/data-layers/lazy-transaction.ts `ensureRunner`'s `connect`: `if (this.ended)
 * return this.afterEnd(() => Promise.resolve(undefined))`, and `connectFrom` hands a view
 * `client ? this.clientOf(view, client) : client`: undefined. (The comment there: "Past the
 * end (a runner an event listener made while the request was open, then connected after it
 * committed, as TypeORM's manual-transaction recipe does): nothing to connect"; that holds for
 * the recipe's `await qr.connect()` whose result is ignored, not for code that uses the
 * client.)
 *
 * Docs quote: docs/guides/transactions.md, "Database work belongs before the answer": "So does
 * a runner or client it took while the request was open and uses past its end with no
 * transaction of its own open (…): from then on it is a runner or connection of its own";
 * "through the node-postgres client a query runner hands out (`await runner.connect()`)" is
 * named among the paths the seam joins.
 *
 * Severity: high (as adversary 87: a write of work the handler started is lost for good, with
 * a TypeError that names nothing, while the 201 is stored and replayed).
 *
 * Fails now (verified unskipped): the left write's outcome "TypeError: Cannot read properties
 * of undefined (reading 'query')", rows ['i1-a'] (expected 'ok', ['i1-a', 'i1-b']). Controls
 * pass: without `@Idempotent()` (both rows), and keyed through `qr.query(…)` in place of the
 * client (both rows: it runs apart).
 *
 * Suggested fix: after the end, a view's `connect()` waits for the outcome (`afterEnd`) and,
 * once the request committed, hands out a client of its own (a pooled connection the view
 * releases at `release()`, as `runnerAfterEnd` does for a transaction), refused after a
 * rollback; never `undefined`.
 *
 * Fixed (session of 2026-12-06, third): past the end, a view's `connect()` waits for the outcome
 * (`apart`) and, once the request committed, hands out a pooled connection of its own, waited
 * for as the app's pool waits and given back at the view's `release()` (also when its
 * transaction moved to a runner of its own); refused with `TransactionEndedError` after a
 * rollback. lib/data-layers/lazy-transaction.ts `connectFrom`, `clientAfterEnd`, the runner's
 * `release`; lib/data-layers/runner-view.ts (release of a view whose transaction ran on its own
 * runner).
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

  async record(tag: string, throughClient: boolean) {
    await this.dataSource.query('INSERT INTO adv88_held_client (tag) VALUES ($1)', [`${tag}-a`]);
    // A listener started now: its runner made while the request is open.
    const qr = this.dataSource.createQueryRunner();
    later = sleep(50).then(async () => {
      try {
        if (throughClient) {
          const client = (await qr.connect()) as PoolClient;
          await client.query('INSERT INTO adv88_held_client (tag) VALUES ($1)', [`${tag}-b`]);
        } else {
          await qr.connect();
          await qr.query('INSERT INTO adv88_held_client (tag) VALUES ($1)', [`${tag}-b`]);
        }
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
    return this.feed.record(body.tag, true);
  }

  @Post('idem')
  @Idempotent()
  idem(@Body() body: { tag: string }) {
    return this.feed.record(body.tag, true);
  }

  @Post('idem-runner')
  @Idempotent()
  idemRunner(@Body() body: { tag: string }) {
    return this.feed.record(body.tag, false);
  }
}

describe('adversary 88 orm: a runner made in the request, its pg client taken after the answer', () => {
  let fixture: TypeormApp;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv88_orm_held_client', {
      controllers: [FeedController],
      providers: [FeedService],
      max: 6,
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE adv88_held_client (id serial PRIMARY KEY, tag text NOT NULL)',
        );
      },
    });
    ({ app } = fixture);
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function scenario(route: 'plain' | 'idem' | 'idem-runner', tag: string) {
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
      'SELECT tag FROM adv88_held_client WHERE tag LIKE $1 ORDER BY id',
      [`${tag}-%`],
    );
    return { status: answer.status, outcome, rows: rows.map((row) => row.tag) };
  }

  it('control: without @Idempotent(), the client is a connection of the pool: both rows', async () => {
    expect(await scenario('plain', 'c1')).toEqual({
      status: 201,
      outcome: 'ok',
      rows: ['c1-a', 'c1-b'],
    });
  }, 30_000);

  it('control: keyed, the runner’s own query() past the end runs on its own: both rows', async () => {
    expect(await scenario('idem-runner', 'c2')).toEqual({
      status: 201,
      outcome: 'ok',
      rows: ['c2-a', 'c2-b'],
    });
  }, 30_000);

  it('keyed, the runner’s pg client past the end is a connection of its own: both rows', async () => {
    expect(await scenario('idem', 'i1')).toEqual({
      status: 201,
      outcome: 'ok',
      rows: ['i1-a', 'i1-b'],
    });
  }, 30_000);
});
