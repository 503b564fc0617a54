import { Body, Controller, HttpException, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 48c (third break): a `oneCommit` handler that fails while its first phase,
 * which holds the claim, still runs beside it.
 *
 * The app (the pool seam): `POST /one` (`@Idempotent({ oneCommit: true })`) runs
 * `Promise.all([run('a', work), validate()])`: the phase's work (one parameter: the claim is
 * handed to it, phase-runner.service.ts:160, request-transaction.ts:253) inserts a note and
 * takes 300 ms; `validate()`, a local async check, throws a 422 after 20 ms. Then `finish()`.
 *
 * What happens: the handler's 422 comes while the claim is the phase's ('handed'). Storing it
 * without the handler's effects, `withoutEffects` (commit-answer.ts:79-85) asks `undoEffects`,
 * which refuses anything but 'held' (request-transaction.ts:436): so the request's transaction
 * is rolled back (it holds nothing) and the answer is stored apart (commit-answer.ts:117), on a
 * fresh connection, where the key's row is not visible (the claim is still uncommitted in the
 * phase): 0 rows, IdempotencyLeaseLostError. The client gets 409 `lease_lost` ("lost its claim
 * to another worker": there is none). Then the phase commits the claim with its note and
 * recovery point: the key is 'started', nothing stored, leased for 5 s: a retry gets 409
 * `key_in_progress` until the lease ends, then a takeover runs the handler again.
 *
 * Expected: as on the same route without `oneCommit`: the handler's 422 is the key's answer,
 * stored, and a retry gets it replayed.
 *
 * Control: `POST /def`, the same handler without `oneCommit`: 422 stored and replayed.
 * Passes. `/one` whose phase ends before the check fails: 422 stored and replayed. Passes.
 *
 * Severity: medium (a wrong status, 409 lease_lost with nothing stored; the key held a lease
 * with no answer, then the handler run again; no effect runs twice: the phase is resumed).
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

class CheckBody {
  text!: string;
  phaseMs!: number;
  failAfterMs!: number;
}

@Controller()
class CheckController {
  constructor(private readonly phases: PhaseRunner) {}

  private async checked(body: CheckBody) {
    const validate = async () => {
      await sleep(body.failAfterMs);
      throw new HttpException({ refused: 'validation' }, 422);
    };
    const [made] = await Promise.all([
      this.phases.run('a', async () => {
        await pool.query('INSERT INTO notes (text) VALUES ($1)', [`${body.text}-a`]);
        await sleep(body.phaseMs);
        return { name: 'a' };
      }),
      validate(),
    ]);
    return this.phases.finish(async () => ({ made, text: body.text }));
  }

  @Post('one')
  @Idempotent({ oneCommit: true })
  one(@Body() body: CheckBody) {
    return this.checked(body);
  }

  @Post('def')
  @Idempotent()
  byDefault(@Body() body: CheckBody) {
    return this.checked(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, claimWaitMs: 400 }),
    }),
  ],
  controllers: [CheckController],
})
class CheckModule {}

describe('adversary 48c: a oneCommit handler failing while its first phase holds the claim', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv48c_beside', {
      module: CheckModule,
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

  const storesTheError = async (
    path: string,
    key: string,
    phaseMs: number,
    failAfterMs: number,
  ) => {
    const body = { text: key, phaseMs, failAfterMs };
    const first = await post(path, key, body);
    expect(first.status).toBe(422);
    expect(first.body).toEqual({ refused: 'validation' });
    // The phase still running when the answer went out: let it end.
    await sleep(500);
    expect(await keyRow(key)).toEqual({ state: 'done', response_code: 422 });
    const again = await post(path, key, body);
    expect(again.status).toBe(422);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
  };

  it('oneCommit: the error is stored and replayed (FAILS: 409 lease_lost, then 409 key_in_progress)', async () => {
    await storesTheError('/one', 'beside-one', 300, 20);
  });

  it('control: the same handler without oneCommit stores its 422 and replays it', async () => {
    await storesTheError('/def', 'beside-def', 300, 20);
  });

  it('control: oneCommit, the phase done before the check fails: 422 stored and replayed', async () => {
    await storesTheError('/one', 'beside-one-fast', 10, 200);
  });
});
