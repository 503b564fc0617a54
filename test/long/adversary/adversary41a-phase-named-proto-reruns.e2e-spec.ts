import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner, RetryLaterError } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 41a: a phase NAMED `__proto__` (data-dependent phases, one per line of an order,
 * named by the line's SKU as the client sent it: rule 7 of docs/guides/phases.md only asks
 * names to be unique) is recorded, but a resumed run never finds it: the retry after a 503 runs
 * the reservation again. The client picks the name.
 *
 * App: the phases guide's pattern on the pool seam (as adversary 40b): `POST /orders` with
 * `{ lines: [{ sku }] }` runs `phases.run(line.sku, ...)` per line (an INSERT into
 * `reservations`), then `phases.call('psp', ...)`, whose provider is down on the first try
 * (`RetryLaterError`: 503, nothing stored, the retry resumes after the last completed phase).
 * What happens: `recordablePhaseName` (lib/phases/phases.ts:32-34) accepts '__proto__' (whole
 * text, no NUL). The phase commits, and PostgreSQL keeps `{"__proto__": {"reserved": true}}`
 * in `phase_results` (lib/claim/postgres-statements.ts:209). The retry's claim reads it back:
 * node-postgres' JSON.parse makes it an own key, but `phaseResultsRead`
 * (lib/claim/phase-result-json.ts:30-38) copies it with `results[phase] = ...`, and assigning
 * `__proto__` on a plain object sets its PROTOTYPE, not a key. `completedPhase`
 * (lib/phases/phases.ts:12-16, `hasOwnProperty`) then finds no phase of that name, so the
 * phase runs again and its INSERT commits a second time. (The same assignment at
 * lib/phases/phase-runner.service.ts:171 loses it within one run too.)
 * Expected: the line reserved once (the retry skips the completed phase), or a clear
 * `phase_name_invalid` before the phase runs.
 * Control: the same order with the SKU 'proto' (resumed past the reservation: reserved once).
 * Severity: critical (a double effect, chosen by the client's input).
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
      // One phase per line, named by its SKU (unique within the order).
      await this.phases.run(line.sku, async () => {
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

describe('adversary 41a: a phase named __proto__, resumed after a 503', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv41a_phase_proto', {
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
        .set('Idempotency-Key', `adv41a-${order}`)
        .send({ order, lines: [{ sku }] });
    const first = await post();
    const retry = await post();
    const reserved = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM reservations WHERE order_ref = $1',
      [order],
    );
    return { statuses: [first.status, retry.status], reservations: reserved.rows[0].n as number };
  }

  it('control: SKU "proto": 503, then resumed past the reservation, reserved once', async () => {
    expect(await conversation('o-plain', 'proto')).toEqual({
      statuses: [503, 201],
      reservations: 1,
    });
  });

  // Fails today: reservations 2 (the retry runs the reservation phase again).
  it('SKU "__proto__": never reserved twice', async () => {
    const outcome = await conversation('o-proto', '__proto__');
    expect(outcome.reservations).toBeLessThanOrEqual(1);
    expect(outcome.statuses[0]).toBe(outcome.reservations === 0 ? 500 : 503);
  });
});
