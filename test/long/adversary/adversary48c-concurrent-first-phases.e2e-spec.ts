import { Body, Controller, HttpException, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 48c (second break): two phases run at once (`Promise.all`) as the first of
 * a `oneCommit` route, the one holding the claim failing.
 *
 * The app (the pool seam): `POST /two-one` (`@Idempotent({ oneCommit: true })`) runs
 * `Promise.all([run('a', work), run('b', work)])`, each work of one parameter inserting a note
 * on the pool; `a` throws a 422 at once, `b` takes 200 ms; then `finish()`.
 *
 * What happens: `run('a')` takes the claim (phase-runner.service.ts:160, `handClaimTo`,
 * request-transaction.ts:253-272); `run('b')` waits in `commitClaimAlone` (:400-401) for it
 * to settle. `a` fails: `handBack` (:836-857) rolls back to the claim's savepoint and `takeBack`
 * (:298-304) gives the claim back and settles, which sets `b`'s `commitClaimAlone` going at
 * once: its COMMIT of the claim (:410-412) is queued on the connection. The handler's 422 (the
 * Promise.all's rejection) then stores its error with the claim: `undoEffects` (:435-446)
 * still sees the claim 'held' (it becomes 'apart' only after the COMMIT, :421-424) and sends
 * `ROLLBACK TO SAVEPOINT idempotency_claimed` after that COMMIT, outside any transaction: it
 * fails. The client gets 500 `transaction_aborted` ("nothing was committed or stored"), while
 * the claim and `b`'s note and recovery point did commit: nothing is stored, the key stays
 * 'started', and `b`'s commit after the release (ADVANCE's `GREATEST(locked_until, ...)`)
 * leases it again: a retry meanwhile gets 409 `key_in_progress`; after the lease, the handler
 * runs again (here a second 422, not a replay).
 *
 * Expected: as on the same route without `oneCommit`: the handler's 422 is the key's answer,
 * stored, and a retry gets it replayed.
 *
 * Control: `POST /two-def`, the same handler without `oneCommit`: 422 stored and replayed.
 * Passes. `/two-one` where both phases succeed: 201, each note once, replayed. Passes.
 *
 * Severity: medium (a wrong status whose text is false: effects and the claim committed under
 * "nothing was committed"; the key held for a lease with no answer stored, then the handler
 * run again; no effect runs twice: `b` is resumed from its recovery point).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

class TwoBody {
  text!: string;
  failA?: boolean;
}

@Controller()
class TwoController {
  constructor(private readonly phases: PhaseRunner) {}

  private async two(body: TwoBody) {
    const step = (name: string, fail: boolean, delayMs: number) =>
      this.phases.run(name, async () => {
        await pool.query('INSERT INTO notes (text) VALUES ($1)', [`${body.text}-${name}`]);
        if (delayMs) await sleep(delayMs);
        if (fail) throw new HttpException({ refused: name }, 422);
        return { name };
      });
    const [a, b] = await Promise.all([step('a', !!body.failA, 0), step('b', false, 200)]);
    return this.phases.finish(async () => ({ a, b, text: body.text }));
  }

  @Post('two-one')
  @Idempotent({ oneCommit: true })
  twoOne(@Body() body: TwoBody) {
    return this.two(body);
  }

  @Post('two-def')
  @Idempotent()
  twoDef(@Body() body: TwoBody) {
    return this.two(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, claimWaitMs: 400 }),
    }),
  ],
  controllers: [TwoController],
})
class TwoModule {}

describe('adversary 48c: two first phases at once on a oneCommit route, the first failing', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv48c_two', {
      module: TwoModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE notes (id serial PRIMARY KEY, text text NOT NULL)');
      },
    });
  }, 60_000);
  afterAll(async () => fixture?.close());

  const post = (path: string, key: string, body: object) =>
    request(fixture.app.getHttpServer()).post(path).set('Idempotency-Key', key).send(body);
  const keyRow = async (key: string) =>
    (
      await fixture.admin.query(
        'SELECT state, response_code FROM idempotency_keys WHERE key = $1',
        [key],
      )
    ).rows[0] as { state: string; response_code: number } | undefined;
  const notes = async (prefix: string) =>
    (
      await fixture.admin.query<{ text: string }>(
        "SELECT text FROM notes WHERE text LIKE $1 || '-%' ORDER BY text",
        [prefix],
      )
    ).rows.map((row) => row.text);

  const storesTheError = async (path: string, key: string) => {
    const body = { text: key, failA: true };
    const first = await post(path, key, body);
    expect(first.status).toBe(422);
    expect(first.body).toEqual({ refused: 'a' });
    // `b` still running when the answer went out: let it end.
    await sleep(500);
    expect(await keyRow(key)).toEqual({ state: 'done', response_code: 422 });
    const again = await post(path, key, body);
    expect(again.status).toBe(422);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
  };

  it('oneCommit: the handler error is stored and replayed (FAILS: 500 transaction_aborted, then 409)', async () => {
    await storesTheError('/two-one', 'two-one-fail');
  });

  it('control: the same handler without oneCommit stores its 422 and replays it', async () => {
    await storesTheError('/two-def', 'two-def-fail');
  });

  it('control: oneCommit, both phases succeed: 201, each effect once, replayed', async () => {
    const first = await post('/two-one', 'two-one-ok', { text: 'two-one-ok' });
    expect(first.status).toBe(201);
    const again = await post('/two-one', 'two-one-ok', { text: 'two-one-ok' });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
    expect(await notes('two-one-ok')).toEqual(['two-one-ok-a', 'two-one-ok-b']);
  });
});
