import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner, RetryLaterError } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 40b: a phase whose NAME holds a lone surrogate (data-dependent phases, one per line
 * of an order, named by the line's SKU as the client sent it) is recorded under another name
 * (U+FFFD in its place); the retry after a 503 does not recognise it and runs it again: the
 * line is reserved twice.
 *
 * App: the phases guide's pattern (docs/guides/phases.md; rule 7: names unique within a
 * handler; phases.ts:7-9: "a phase that only sometimes runs" resumes right) on the pool seam:
 * `POST /orders` with `{ lines: [{ sku }] }` runs `phases.run(`reserve:${sku}`)` per line
 * (an INSERT into `reservations`), then `phases.call('psp', ...)`, whose provider is down on
 * the first try (`RetryLaterError`: 503, nothing stored, the retry resumes after the last
 * completed phase, rule 6). The client's SKU is a label it cut with `slice()` inside an emoji
 * ('mug-🍰'.slice(0, 5) = 'mug-\ud83c'), which JSON carries as the escape `\ud83c`.
 * What happens: the phase's name goes to PostgreSQL as a text parameter
 * (lib/claim/postgres-claim.store.ts:305, `ADVANCE` lib/claim/postgres-statements.ts:209,
 * `jsonb_build_object($5::text, ...)` and `recovery_point = $5`); node-postgres encodes it as
 * UTF-8, which writes the lone surrogate as U+FFFD: the result is kept under
 * 'reserve:mug-\ufffd'. Round 39's wrapper (lib/claim/phase-result-json.ts) makes the phase's
 * RESULT storable, not its name. The retry's claim reads the results back
 * (postgres-claim.store.ts:206), and `completedPhase` (lib/phases/phases.ts:11-15) looks for
 * 'reserve:mug-\ud83c': not there, so the phase runs again and its INSERT commits a second
 * time. The library refuses such text in a key (400, idempotency.errors.ts:67) and a message
 * id (messages/message-id.ts:51-53), not in a phase name. (Two lines 'mug-\ud83c' and
 * 'mug-\ud83d' would even share one recorded name.)
 * Expected: the line reserved once (the retry skips the completed phase), or a clear error
 * before the phase runs.
 * Control: the same order with a SKU that is whole text ('mug-c'): reserved once, 201.
 * Severity: critical (a double effect; the client's own input, a cut label or a crafted SKU,
 * picks it).
 */
let pool: Pool;
let providerDown = new Set<string>();

@Controller()
class OrdersController {
  constructor(private readonly phases: PhaseRunner) {}

  @Post('orders')
  @Idempotent()
  async create(@Body() body: { order: string; lines: { sku: string }[] }) {
    for (const line of body.lines) {
      await this.phases.run(`reserve:${line.sku}`, async () => {
        // The pool given to the library: it joins the phase's transaction (data-layers.md).
        await pool.query('INSERT INTO reservations (order_ref, sku) VALUES ($1, $2)', [
          body.order,
          line.sku,
        ]);
        return { reserved: true };
      });
    }
    const paid = await this.phases.call('psp', async ({ idempotencyKey }) => {
      if (providerDown.delete(body.order)) throw new RetryLaterError('The PSP is unreachable', 1);
      return { charge: `ch_${idempotencyKey.length}` };
    });
    return { order: body.order, charge: paid.charge };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 40b: a phase name with a lone surrogate, resumed after a 503', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv40b_phase_name', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE reservations (order_ref text NOT NULL, sku text NOT NULL)');
      },
    });
  }, 60_000);
  afterAll(async () => fixture?.close());
  beforeEach(() => {
    providerDown = new Set<string>();
  });

  async function conversation(order: string, sku: string) {
    providerDown.add(order);
    const post = () =>
      request(fixture.app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', `adv40b-${order}`)
        .send({ order, lines: [{ sku }] });
    const first = await post();
    const retry = await post();
    const reserved = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM reservations WHERE order_ref = $1',
      [order],
    );
    return { statuses: [first.status, retry.status], reservations: reserved.rows[0].n as number };
  }

  it('control: a SKU of whole text: 503, then resumed past the reservation, reserved once', async () => {
    expect(await conversation('o-whole', 'mug-🍰'.slice(0, 4) + 'c')).toEqual({
      statuses: [503, 201],
      reservations: 1,
    });
  });

  // Fails today: reservations 2 (the retry runs the reservation phase again).
  // The header's second outcome: a clear error before the phase runs (phase_name_invalid).
  it('a SKU cut inside an emoji: never reserved twice, refused before the phase ran', async () => {
    const outcome = await conversation('o-cut', 'mug-🍰'.slice(0, 5));
    expect(outcome).toEqual({ statuses: [500, 500], reservations: 0 });
  });
});
