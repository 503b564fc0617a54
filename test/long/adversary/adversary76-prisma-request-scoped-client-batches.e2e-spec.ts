/**
 * Adversary 76 (prisma): a Prisma client provided per request (a request-scoped provider whose
 * factory returns `base.$extends(...)` for the caller's tenant, Prisma's own per-request
 * extension pattern) is skipped by the library's start-up check, so Prisma's batching stays
 * shared across requests: two SERIALIZABLE requests whose handlers read in one tick (as the
 * handlers of one claim batch start) read in ONE request's transaction, and a write skew that
 * SERIALIZABLE must refuse commits under two stored 201s.
 *
 *   const base = new PrismaClient({ adapter: new PrismaPg(pool) }); // the library's pool
 *   providers: [{
 *     provide: TENANT_PRISMA,
 *     scope: Scope.REQUEST,
 *     inject: [REQUEST],
 *     useFactory: (req) => base.$extends({ client: { $tenant: () => req.headers['x-tenant'] } }),
 *   }]
 *   // handler (@Idempotent({ isolationLevel: 'SERIALIZABLE' })): read the other doctor with
 *   // prisma.doctor.findUnique, leave the shift if the other is on call.
 *
 * Why: lib/prisma-batches.check.ts `PrismaBatchesCheck.onModuleInit` patches Prisma's
 * DataLoader (`keepBatchesPerScope`, lib/data-layers/prisma/scoped-batches.ts) only for
 * providers whose `wrapper.isDependencyTreeStatic()` is true and which have an `instance`;
 * a request-scoped provider has neither at start-up, and is skipped in silence (neither
 * patched nor reported). The DataLoader it shares with `base` then queues both requests'
 * `findUnique` calls in one tick and sends them (`SELECT ... WHERE id IN (...)`) from a
 * `process.nextTick` of the first caller, in the first request's transaction: the second
 * request's read is not its own, SERIALIZABLE sees no rw-conflict, both leave.
 *
 * Docs (docs/guides/prisma.md, "Prisma's batched reads"): "The library keeps them apart:
 * inside a request (or a phase), Prisma batches only that request's own calls ... Nothing to
 * write: at start-up the library does it for the Prisma clients among the app's providers (the
 * `PrismaService` above, an `$extends` of it too)". A request-scoped provider IS among the
 * app's providers; nothing says its scope matters, nor is anything logged. The same for the
 * guide's own `PrismaService` declared `@Injectable({ scope: Scope.TRANSIENT })` (a client per
 * consumer, each shared by every request): the second case.
 *
 * Severity: high (a wrong effect committed: both doctors leave a shift that must keep one on
 * call, under SERIALIZABLE, each answer stored as a success).
 *
 * Fails now (both broken cases): in each of 3 rounds, no doctor of the shift is left on call (`onCall` received
 * [0, 0, 0], expected [1, 1, 1]): both keyed requests answered 201 `{"left":true}`, stored. The
 * control (the same handler on the same base client given as a singleton provider, the guide's
 * form) keeps one on call: one leaves, the other answers 503 `database_transient` and its retry
 * `left: false`. The broken case runs first: the library's patch is per DataLoader class, for
 * the whole process, so once the control's singleton is patched every client is.
 *
 * Suggested fix: do not skip non-static providers in silence. At start-up, for a provider
 * that is not static, patch the DataLoader class of any Prisma client reachable without a
 * request (or refuse to start, naming the provider, with the advice to call
 * `keepPrismaBatchesPerRequest(base)`); better, patch Prisma's DataLoader class once, from
 * the first batched call the pool seam sees inside a request scope (its `request()` is on
 * the prototype every client of the runtime shares), so that no provider shape can miss it.
 *
 * Fixed: the start-up check looks at each consumer's instance of a transient provider, and
 * notes the non-static ones; the interceptor keeps the batches of a Prisma client its request
 * resolved before the handler runs (lib/prisma-request-clients.ts, lib/prisma-batches.check.ts).
 */
import {
  Body,
  Controller,
  Inject,
  Injectable,
  Module,
  Post,
  Scope,
  type Provider,
} from '@nestjs/common';
import { REQUEST } from '@nestjs/core';
import { PrismaPg } from '@prisma/adapter-pg';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { PrismaClient } from '../../examples/support/prisma-on-call/generated/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const TENANT_PRISMA = 'TENANT_PRISMA';
type Db = Pick<PrismaClient, 'doctor'>;

/** A wait that keeps no process alive. */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms).unref());

/**
 * The first two requests of `group` wait for each other here, then go on together: their next
 * Prisma call is made in one tick, as the handlers of one claim batch make theirs. Bounded.
 */
const groups = new Map<string, { arrived: number; met: Promise<void>; meet: () => void }>();
function together(group: string): Promise<void> {
  let entry = groups.get(group);
  if (!entry) {
    let meet = () => {};
    const met = new Promise<void>((resolve) => (meet = resolve));
    entry = { arrived: 0, met, meet };
    groups.set(group, entry);
  }
  if (++entry.arrived >= 2) entry.meet();
  return Promise.race([entry.met, sleep(10_000)]).then(() => undefined);
}

interface LeaveBody {
  shift: string;
  doctorId: number;
  otherId: number;
}

@Injectable()
class Roster {
  constructor(@Inject(TENANT_PRISMA) private readonly prisma: Db) {}

  /** A doctor leaves the shift if the other one is on call (kept by SERIALIZABLE). */
  async leave(body: LeaveBody) {
    await together(body.shift);
    const other = await this.prisma.doctor.findUnique({ where: { id: body.otherId } });
    // Both have read before either writes: the two transactions overlap.
    await together(`${body.shift}/read`);
    if (!other?.onCall) return { left: false };
    await this.prisma.doctor.update({ where: { id: body.doctorId }, data: { onCall: false } });
    return { left: true };
  }
}

@Controller('on-call')
class OnCallController {
  constructor(private readonly roster: Roster) {}

  @Post('leave')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  leave(@Body() body: LeaveBody) {
    return this.roster.leave(body);
  }
}

let pool: Pool;
let base: PrismaClient;

/** The app as a multi-tenant Nest app writes it: the client extended per request. */
const perRequest: Provider = {
  provide: TENANT_PRISMA,
  scope: Scope.REQUEST,
  inject: [REQUEST],
  useFactory: (req: { headers: Record<string, string | undefined> }) =>
    base.$extends({ client: { $tenant: () => req.headers['x-tenant'] ?? 'none' } }),
};

/** The guide's `PrismaService`, made TRANSIENT (a client per consumer): skipped the same way. */
@Injectable({ scope: Scope.TRANSIENT })
class TransientPrisma extends PrismaClient {
  constructor() {
    super({ adapter: new PrismaPg(pool) });
  }
}
const transient: Provider = {
  provide: TENANT_PRISMA,
  useClass: TransientPrisma,
  scope: Scope.TRANSIENT,
};

/** The guide's form: the same client, a singleton provider. */
const singleton: Provider = { provide: TENANT_PRISMA, useFactory: () => base };

async function start(name: string, provider: Provider): Promise<PoolApp> {
  @Module({
    imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
    controllers: [OnCallController],
    providers: [provider, Roster],
  })
  class OnCallModule {}
  return startPoolApp(name, {
    module: OnCallModule,
    max: 6,
    usePool: (started) => {
      pool = started;
      base = new PrismaClient({ adapter: new PrismaPg(started) });
    },
    setup: async (owner) => {
      await owner.query(`CREATE TABLE doctors (
        id serial PRIMARY KEY, shift text NOT NULL, name text NOT NULL, on_call boolean NOT NULL)`);
    },
  });
}

/** Two doctors of one shift leave at once (different keys), each retried once after a 503. */
async function bothLeave(fixture: PoolApp, shift: string) {
  const { rows } = await fixture.admin.query<{ id: number }>(
    `INSERT INTO doctors (shift, name, on_call) VALUES ($1, 'alice', true), ($1, 'bob', true)
     RETURNING id`,
    [shift],
  );
  const [a, b] = rows.map((row) => row.id);
  const leave = async (doctorId: number, otherId: number) => {
    const send = () =>
      request(fixture.app.getHttpServer())
        .post('/on-call/leave')
        .set('Idempotency-Key', `${shift}-${doctorId}`)
        .set('x-tenant', 't1')
        .send({ shift, doctorId, otherId })
        .timeout(30_000);
    const first = await send();
    return first.status === 503 ? { first: first.status, retried: await send() } : { first };
  };
  const answers = await Promise.all([leave(a, b), leave(b, a)]);
  const left = answers.map(({ first, retried }) =>
    JSON.stringify(retried ? [first, retried.status, retried.body] : [first.status, first.body]),
  );
  const { rows: after } = await fixture.admin.query<{ on_call: boolean }>(
    `SELECT on_call FROM doctors WHERE shift = $1 ORDER BY id`,
    [shift],
  );
  return { left, onCall: after.filter((row) => row.on_call).length };
}

describe('adversary 76 prisma: a request-scoped Prisma client keeps batching across requests', () => {
  describe('the client extended per request (request-scoped provider)', () => {
    let fixture: PoolApp;
    beforeAll(async () => {
      fixture = await start('adv76_prisma_rs_broken', perRequest);
    }, 60_000);
    afterAll(async () => {
      await base?.$disconnect();
      await fixture?.close();
    });

    it('one doctor stays on call (SERIALIZABLE refuses the write skew)', async () => {
      const outcomes = [];
      for (let round = 0; round < 3; round += 1) {
        outcomes.push(await bothLeave(fixture, `scoped-${round}`));
      }
      expect(outcomes.map((outcome) => outcome.onCall)).toEqual([1, 1, 1]);
    }, 120_000);
  });

  describe("the guide's PrismaService made transient (Scope.TRANSIENT)", () => {
    let fixture: PoolApp;
    beforeAll(async () => {
      fixture = await start('adv76_prisma_tr_broken', transient);
    }, 60_000);
    afterAll(async () => {
      await base?.$disconnect();
      await fixture?.close();
    });

    it('one doctor stays on call (SERIALIZABLE refuses the write skew)', async () => {
      const outcomes = [];
      for (let round = 0; round < 3; round += 1) {
        outcomes.push(await bothLeave(fixture, `transient-${round}`));
      }
      expect(outcomes.map((outcome) => outcome.onCall)).toEqual([1, 1, 1]);
    }, 120_000);
  });

  describe('control: the client as a singleton provider (the guide)', () => {
    let fixture: PoolApp;
    beforeAll(async () => {
      fixture = await start('adv76_prisma_rs_control', singleton);
    }, 60_000);
    afterAll(async () => {
      await base?.$disconnect();
      await fixture?.close();
    });

    it('one doctor stays on call', async () => {
      for (let round = 0; round < 3; round += 1) {
        const { onCall } = await bothLeave(fixture, `control-${round}`);
        expect(onCall).toBe(1);
      }
    }, 120_000);
  });
});
