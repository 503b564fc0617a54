/**
 * Adversary 60: a client takes a scheduled task's future ticks from it through any
 * `@Idempotent()` route, by naming its tenant `schedule:<task>` and its key the tick's slot.
 *
 * The app: the README's / quick start's module, `IdempotencyModule.forRoot({ tenant: (request)
 * => request.headers['x-tenant-id'] })` (here on the pool seam), its `POST /orders`
 * `@Idempotent()` route, and a task `@Cron('* * * * * *', { name: 'settle' })` +
 * `@IdempotentTask()` that records each tick (in life the payout settlement of the schedule
 * guide). A client sends `POST /orders` with `X-Tenant-Id: schedule:settle` and `Idempotency-Key:
 * <a coming slot, 2026-12-04T21:40:00.000Z>`: both are well-formed (`readTenantId` takes any
 * 1-255 character string; an ISO time is a valid key).
 *
 * What happens: the route's key is stored under tenant `schedule:settle`, key = the slot, the
 * route's fingerprint. When the tick fires, `runSlot` (lib/tasks/idempotent-tasks.service.ts)
 * claims `{ tenantId: 'schedule:' + name, key: slotKey(slot) }` in the same table: the row is
 * there with another fingerprint, `claimOrDecide` throws `IdempotencyKeyMismatchError`, which
 * `runSlot` rethrows; `@nestjs/schedule` logs it and the tick does not run, on any replica.
 * Every coming tick can be taken so, days ahead, one request each. (A request of that tenant
 * left `started` with its lease out is in turn swept by the task's `resumeLeftovers` as one of
 * its ticks, and refused the same way, on every tick. `bullmq:<queue>` keys share the flaw.)
 *
 * Expected (docs/snippets/schedule/app.module.ts, docs/guides/schedule.md): "An app's tasks'
 * keys are kept per task (`schedule:<name>`), whatever its routes' tenant"; the ticks run.
 *
 * Control: the same request under another tenant (`acme`) with the same key: the tick runs.
 *
 * Severity: high (any client of a route whose tenant it names cancels the app's scheduled work;
 * the tenant-from-header resolver is the README's own).
 *
 * Fixed: a tenant beginning with `schedule:` or `bullmq:` (the library's own key spaces) is
 * refused (400 tenant_invalid, lib/decisions/tenant-id.ts `RESERVED_TENANT_PREFIXES`): the
 * order is not taken, and the tick runs.
 */
import {
  Controller,
  Inject,
  Injectable,
  type INestApplication,
  Module,
  Post,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { Cron, ScheduleModule } from '@nestjs/schedule';
import { Pool } from 'pg';
import { Idempotent, IdempotencyModule, IdempotentTask } from '../../../lib/index.js';
import { recordTick, sleep, TICKS_POOL } from '../../support/adv59-app.js';
import { useTaskReplicas } from '../../support/task-replicas.js';

@Injectable()
class Settle {
  constructor(@Inject(TICKS_POOL) private readonly pool: Pool) {}

  @Cron('* * * * * *', { name: 'settle' })
  @IdempotentTask()
  settle() {
    return recordTick(this.pool, 'settle');
  }
}

@Controller('orders')
class Orders {
  @Post()
  @Idempotent()
  create() {
    return { id: 1 };
  }
}

describe('adversary 60: an HTTP tenant named schedule:<task>', () => {
  const replicas = useTaskReplicas('adv60_tenant');
  let app: INestApplication | undefined;
  let pool: Pool | undefined;
  beforeEach(() => replicas.reset());
  afterEach(async () => {
    await app?.close();
    await pool?.end();
    app = pool = undefined;
  });

  async function start(): Promise<string> {
    pool = new Pool({ connectionString: replicas.url(), max: 4 });
    const ticks = pool;
    @Module({
      imports: [
        ScheduleModule.forRoot(),
        IdempotencyModule.forRoot({
          tenant: (request) => request.headers['x-tenant-id'] as string,
          pool: ticks,
        }),
      ],
      controllers: [Orders],
      providers: [{ provide: TICKS_POOL, useValue: ticks }, Settle],
    })
    class AppModule {}
    app = await NestFactory.create(AppModule, { logger: false, abortOnError: false });
    await app.listen(0, '127.0.0.1');
    return app.getUrl();
  }

  /** A client's order under `tenant` keyed by a slot 3 s ahead; whether that tick ran. */
  async function orderThenTick(tenant: string) {
    const url = await start();
    const slot = new Date(Math.ceil(Date.now() / 1000) * 1000 + 3_000).toISOString();
    const order = await fetch(`${url}/orders`, {
      method: 'POST',
      headers: {
        'x-tenant-id': tenant,
        'idempotency-key': slot,
        'content-type': 'application/json',
      },
      body: '{}',
    });
    while (Date.now() < Date.parse(slot) + 1_500) await sleep(100);
    const ran = (await replicas.ticks()).some((row) => row.slot === slot);
    const others = (await replicas.ticks()).length;
    const { code } = (await order.json()) as { code?: string };
    return { status: order.status, code, ran, others: others > 2 };
  }

  it('control: an order under another tenant, the same key: the tick runs', async () => {
    expect(await orderThenTick('acme')).toEqual({ status: 201, ran: true, others: true });
  }, 30_000);

  it('an order under tenant schedule:settle does not take the tick of its key', async () => {
    // Failed before its fix: ran was false (the tick met the order's row: key mismatch,
    // logged, not run). The library's key spaces are its own: the order is refused, saying so.
    expect(await orderThenTick('schedule:settle')).toEqual({
      status: 400,
      code: 'tenant_invalid',
      ran: true,
      others: true,
    });
  }, 30_000);
});
