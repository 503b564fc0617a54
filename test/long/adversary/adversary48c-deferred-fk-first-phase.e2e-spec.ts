import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 48c: a `oneCommit` route's first phase whose COMMIT fails for a reason
 * that lasts: a DEFERRABLE INITIALLY DEFERRED foreign key (TypeORM's `deferrable: 'INITIALLY
 * DEFERRED'`, or plain DDL), checked at COMMIT, not at the INSERT.
 *
 * The app (the pool seam): `lines.order_id REFERENCES orders DEFERRABLE INITIALLY DEFERRED`.
 * `POST /one-commit` (`@Idempotent({ oneCommit: true })`) runs one phase, `run('line_made',
 * async () => pool.query('INSERT INTO lines ...'))` (work of one parameter: the claim is handed
 * to the phase, phase-runner.service.ts:160-168), then `finish()`. The client sends an order id
 * that does not exist.
 *
 * What happens: the phase's fenced statement and COMMIT (request-transaction.ts:737) fail with
 * 23503; PostgreSQL rolled the whole transaction back, the claim that was handed to it with it.
 * The library takes it as a commit of unknown outcome: `end(client, error)` (:767), whose
 * `settleHandedBy` (:289) tells the request's transaction its claim is 'apart' (committed).
 * The handler's error is then stored by a fenced statement alone on a fresh connection
 * (:697-705): no row (the claim was rolled back) -> 0 rows -> IdempotencyLeaseLostError: the
 * client gets 409 `lease_lost`, `Retry-After: 1`, "retry to receive the stored result".
 * Nothing is stored, so every retry runs again and gets the same 409: a permanent error
 * answered "retry later" for ever, and the key's first answer is never a final one.
 *
 * Expected: as on the same route without `oneCommit` (and as transactions.md says of a failed
 * first phase: "the handler's error is stored with it as any error"): the handler's error
 * (500) is the key's answer, and a retry gets it replayed.
 *
 * Control: `POST /default`, the same handler without `oneCommit`: 500 stored, replayed.
 * Passes. A valid order id on `/one-commit`: 201, replayed. Passes.
 *
 * Severity: medium (a permanent error answered as "retry later" / lease lost, on every
 * retry; no effect runs twice).
 */
let pool: Pool;

class LineBody {
  orderId!: number;
  text!: string;
}

@Controller()
class LinesController {
  constructor(private readonly phases: PhaseRunner) {}

  private async phased(body: LineBody) {
    const made = await this.phases.run('line_made', async () => {
      const { rows } = await pool.query<{ id: number }>(
        'INSERT INTO lines (order_id, text) VALUES ($1, $2) RETURNING id',
        [body.orderId, body.text],
      );
      return { id: rows[0].id };
    });
    return this.phases.finish(async () => ({ id: made.id, text: body.text }));
  }

  @Post('one-commit')
  @Idempotent({ oneCommit: true })
  oneCommit(@Body() body: LineBody) {
    return this.phased(body);
  }

  @Post('default')
  @Idempotent()
  byDefault(@Body() body: LineBody) {
    return this.phased(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, claimWaitMs: 400 }),
    }),
  ],
  controllers: [LinesController],
})
class LinesModule {}

describe('adversary 48c: a oneCommit first phase refused at its COMMIT', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv48c', {
      module: LinesModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id int PRIMARY KEY)');
        await admin.query(
          'CREATE TABLE lines (id serial PRIMARY KEY, order_id int NOT NULL REFERENCES orders ' +
            'DEFERRABLE INITIALLY DEFERRED, text text NOT NULL)',
        );
        await admin.query('INSERT INTO orders VALUES (1)');
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

  const failsForEver = async (path: string, key: string) => {
    const first = await post(path, key, { orderId: 2, text: 'no order' });
    expect(first.status).toBe(500);
    expect(await keyRow(key)).toEqual({ state: 'done', response_code: 500 });
    const again = await post(path, key, { orderId: 2, text: 'no order' });
    expect(again.status).toBe(500);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
  };

  // Fixed as far as the permanent error goes, not as the header expected: the COMMIT that
  // PostgreSQL refused took the claim with it (it was in that transaction), so nothing holds
  // the key to store the answer with. The handler's 500 goes out as it is, never "retry later"
  // nor lease_lost, and a retry runs afresh and meets the same 500; nothing commits. Stated in
  // transactions.md (a deferred constraint on a oneCommit route's first phase).
  it('oneCommit: a first phase refused at its COMMIT answers the handler error, not stored (409 lease_lost before)', async () => {
    const key = 'deferred-one-commit';
    for (let attempt = 0; attempt < 2; attempt++) {
      const answer = await post('/one-commit', key, { orderId: 2, text: 'no order' });
      expect(answer.status).toBe(500);
      expect(answer.headers['retry-after']).toBeUndefined();
      expect(answer.headers['idempotent-replayed']).toBeUndefined();
      expect(await keyRow(key)).toBeUndefined();
    }
  });

  it('control: the same handler without oneCommit stores its 500 and replays it', async () => {
    await failsForEver('/default', 'deferred-default');
  });

  it('control: oneCommit with an order that exists: 201, replayed', async () => {
    const first = await post('/one-commit', 'ok-one-commit', { orderId: 1, text: 'fine' });
    expect(first.status).toBe(201);
    const again = await post('/one-commit', 'ok-one-commit', { orderId: 1, text: 'fine' });
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(again.body).toEqual(first.body);
  });
});
