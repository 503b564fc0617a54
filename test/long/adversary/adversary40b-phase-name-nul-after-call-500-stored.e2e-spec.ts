import { Body, Controller, Module, Post } from '@nestjs/common';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, PhaseRunner } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 40b: a phase whose NAME holds a NUL (one `call()` phase per line of an order, named
 * by the line's SKU as the client sent it) makes the external call, then fails to record it:
 * a generic 500 "Internal server error" is stored and replayed for ever, while the warehouse
 * reserved the stock. Round 39 made a phase's RESULT with a NUL storable
 * (lib/claim/phase-result-json.ts), not its name.
 *
 * App: the phases guide's pattern (docs/guides/phases.md, rule 3: external calls in
 * `call(phase, call, record)` with the derived key) on the pool seam: `POST /orders` with
 * `{ lines: [{ sku }] }` runs `phases.call(`reserve:${sku}`, ...)` per line, which asks the
 * warehouse to reserve with `idempotencyKey`, and records the reservation id in `record`.
 * The client's SKU holds a NUL (JSON's `\u0000`: a crafted or corrupted input).
 * What happens: `call()` (lib/phases/phase-runner.service.ts:105-122) checks nothing of the
 * name, commits the claim, makes the warehouse call, then commits the record with
 * `ADVANCE` (lib/claim/postgres-statements.ts:209: `recovery_point = $5`,
 * `jsonb_build_object($5::text, ...)`, the name a text parameter): PostgreSQL refuses the NUL
 * (22021 invalid byte sequence for encoding "UTF8": 0x00). `guard` (phase-runner.service.ts:211-217)
 * hands it on as the handler's error: Nest's 500 "Internal server error", stored (state done,
 * 500) and replayed to every retry; the warehouse holds the reservation made with the phase's
 * derived key. The library refuses a NUL in a key (400, lib/shapes/idempotency.errors.ts:67)
 * and in a message id (lib/messages/message-id.ts:51), before anything runs; not in a phase
 * name.
 * Expected: a clear, true error before the external call (nothing called, nothing stored as
 * the answer), or the reservation recorded and answered 201.
 * Control: the same order with a SKU without a NUL: one warehouse call, 201, replayed.
 * Severity: critical by the guide (as adversary 39c: a wrong answer stored for ever, a 500 for
 * a reservation that was made; the input that picks it is the client's).
 */
let pool: Pool;
let warehouseCalls: string[] = [];

@Controller()
class OrdersController {
  constructor(private readonly phases: PhaseRunner) {}

  @Post('orders')
  @Idempotent()
  async create(@Body() body: { order: string; lines: { sku: string }[] }) {
    const reservations: string[] = [];
    for (const line of body.lines) {
      const { reservation } = await this.phases.call(
        `reserve:${line.sku}`,
        async ({ idempotencyKey }) => {
          warehouseCalls.push(idempotencyKey);
          return { reservation: `rs_${warehouseCalls.length}` };
        },
        async (_manager, result) => {
          // The pool given to the library: it joins the phase's transaction (data-layers.md).
          await pool.query('INSERT INTO reservations (order_ref, reservation) VALUES ($1, $2)', [
            body.order,
            result.reservation,
          ]);
          return result;
        },
      );
      reservations.push(reservation);
    }
    return { order: body.order, reservations };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [OrdersController],
})
class OrdersModule {}

describe('adversary 40b: a phase name with a NUL, after its external call', () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv40b_phase_nul', {
      module: OrdersModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE reservations (order_ref text NOT NULL, reservation text NOT NULL)',
        );
      },
    });
  }, 60_000);
  afterAll(async () => fixture?.close());
  beforeEach(() => {
    warehouseCalls = [];
  });

  async function conversation(order: string, sku: string) {
    const post = () =>
      request(fixture.app.getHttpServer())
        .post('/orders')
        .set('Idempotency-Key', `adv40b-${order}`)
        .send({ order, lines: [{ sku }] });
    const first = await post();
    const retry = await post();
    return {
      statuses: [first.status, retry.status],
      genericServerError: [first.text, retry.text].some((text) =>
        text.includes('Internal server error'),
      ),
      warehouseCalls: warehouseCalls.length,
    };
  }

  it('control: a SKU without a NUL: reserved once, 201, replayed', async () => {
    expect(await conversation('o-plain', 'mug-c')).toEqual({
      statuses: [201, 201],
      genericServerError: false,
      warehouseCalls: 1,
    });
  });

  // Fails today: { statuses: [500, 500], genericServerError: true, warehouseCalls: 1 }.
  it('a SKU with a NUL: a clear error before the warehouse is called, or the reservation answered', async () => {
    const outcome = await conversation('o-nul', 'mug\u0000c');
    const refusedBeforeCall = outcome.warehouseCalls === 0 && !outcome.genericServerError;
    const answered = outcome.statuses.every((status) => status === 201);
    expect({ outcome, fine: refusedBeforeCall || answered }).toEqual({
      outcome,
      fine: true,
    });
  });
});
