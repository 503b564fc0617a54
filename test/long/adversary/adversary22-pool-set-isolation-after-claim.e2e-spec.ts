import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 22: on a `oneCommit` route, a handler on the pool seam (Drizzle's
 * `db.execute(sql\`SET TRANSACTION ISOLATION LEVEL SERIALIZABLE\`)`, Prisma's `$executeRaw`,
 * Kysely's `sql\`…\`.execute(db)`, all a `pool.query()`) that asks for its level first is
 * answered 500, and that 500 is stored as the key's final answer: the retry replays it, the
 * work never runs. The same handler on a route without `oneCommit` runs at SERIALIZABLE.
 *
 * What the app does (Express, pool): `POST /transfer` sends `SET TRANSACTION ISOLATION LEVEL
 * SERIALIZABLE` through `pool.query()` as its first statement, then reads the level and
 * writes a row.
 *
 * What happens: pool-transaction.ts:206,281-282 (`leadingIsolationOf`) takes a leading `SET
 * TRANSACTION ISOLATION LEVEL` as the level to begin at only `if (!this.beginning)`. On a
 * `oneCommit` route the claim's round trip (`beginWithClaim`) has set `beginning` already, so
 * the statement skips `askIsolation` (request-transaction.ts:756-768, which would commit the
 * claim alone and begin anew at that level, `commitClaimAlone`, as it does for a nested
 * `BEGIN ISOLATION LEVEL …` on a view) and is sent as it is into the claim's transaction:
 * PostgreSQL answers 25001 ("SET TRANSACTION ISOLATION LEVEL must be called before any
 * query"), the handler fails, and its error is stored with the claim.
 *
 * What should happen: idempotency-options.interface.ts (`isolationLevel`): "the first nested
 * transaction that asks for a level (...) sets it, if it comes before any write"; the
 * statement's own comment (pool-transaction.ts:276-279: "taken as the level to begin at"),
 * and `oneCommit`'s doc: the claim commits alone first where the request needs "a
 * transaction of another level" (request-transaction.ts `commitClaimAlone`). The handler's
 * first database work asks for SERIALIZABLE: it must run at SERIALIZABLE, as without
 * `oneCommit`.
 *
 * Why it matters: turning `oneCommit` on (a module-wide performance option) turns a working
 * route of a Drizzle/Prisma/Kysely app into one that answers 500 for every new key, and the
 * 500 is stored: the client's retries with the same key can never succeed.
 *
 * Severity: high for the routes it hits (every request fails, permanently per key), no
 * silent double effect.
 */
let pool: Pool;

@Controller()
class TransferController {
  private async transfer(text: string) {
    await pool.query('SET TRANSACTION ISOLATION LEVEL SERIALIZABLE');
    const { rows } = await pool.query<{ level: string }>(
      "SELECT current_setting('transaction_isolation') AS level",
    );
    await pool.query('INSERT INTO notes (text) VALUES ($1)', [text]);
    return { level: rows[0].level, text };
  }

  @Post('transfer-one-commit')
  @Idempotent({ oneCommit: true })
  oneCommit(@Body() body: { text: string }) {
    return this.transfer(body.text);
  }

  @Post('transfer')
  @Idempotent()
  twoCommits(@Body() body: { text: string }) {
    return this.transfer(body.text);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [TransferController],
})
class TransferModule {}

describe('adversary 22: SET TRANSACTION ISOLATION LEVEL through the pool on a oneCommit route', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv22_set_isolation', {
      module: TransferModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const post = (path: string, key: string, body: object) =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const rows = async (text: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM notes WHERE text = $1', [text])).rows[0]
        .count,
    );

  it('control: without oneCommit, the leading SET TRANSACTION sets the level', async () => {
    const answer = await post('/transfer', 'adv22-iso-control', { text: 'control' });
    expect(answer.status).toBe(201);
    expect(answer.body).toEqual({ level: 'serializable', text: 'control' });
    expect(await rows('control')).toBe(1);
  });

  it('oneCommit: the same handler runs at SERIALIZABLE (fails: 500, stored)', async () => {
    const answer = await post('/transfer-one-commit', 'adv22-iso-one', { text: 'one' });
    const retry = await post('/transfer-one-commit', 'adv22-iso-one', { text: 'one' });
    const stored = (
      await fixture.admin.query(
        'SELECT state, response_code FROM idempotency_keys WHERE key = $1',
        ['adv22-iso-one'],
      )
    ).rows[0] as { state: string; response_code: number } | undefined;
    expect({
      status: answer.status,
      body: answer.body as unknown,
      retry: retry.status,
      stored,
      rows: await rows('one'),
    }).toEqual({
      status: 201,
      body: { level: 'serializable', text: 'one' },
      retry: 201,
      stored: { state: 'done', response_code: 201 },
      rows: 1,
    });
  });
});
