/**
 * Adversary 77: a Prisma client per tenant, provided the way Nest's docs give for tenants
 * ("Durable providers": `@Injectable({ scope: Scope.REQUEST, durable: true })` with a
 * `ContextIdStrategy` that aggregates the requests of one tenant), on the module's pg pool.
 * Two idempotent requests of one tenant that each write a doctor and read it back with
 * `findUnique` at the same moment: Prisma batches the two reads into one query, sent in the
 * FIRST request's transaction, so the second request does not see its own row and answers
 * (and stores, and replays) `found: false`. Without `@Idempotent()`: both `found: true`.
 *
 *   @Injectable({ scope: Scope.REQUEST, durable: true })
 *   class TenantPrisma extends PrismaClient {
 *     constructor(@Inject(PG_POOL) pool: Pool) { super({ adapter: new PrismaPg(pool) }); }
 *   }
 *   ContextIdFactory.apply(new AggregateByTenantContextIdStrategy());   // Nest's docs
 *
 *   @Post('own-read') @Idempotent()
 *   async ownRead(@Body() b) {
 *     const { id } = await this.prisma.doctor.create({ data: { … } });
 *     const row = await this.prisma.doctor.findUnique({ where: { id } });
 *     return { found: row?.id === id };
 *   }
 *
 * Why: `keepRequestScopedBatches` (lib/prisma-request-clients.ts) looks the request-scoped
 * provider up with `wrapper.getInstanceByContextId(ContextIdFactory.getByRequest(request))`:
 * the REQUEST's context id. A durable provider lives under the tenant's context id (Nest's
 * injector resolves it through `contextId.getParent(...)`), so the lookup finds an unresolved
 * clone (`isResolved` false), `continue`s, and the client's batching is never kept per request
 * (prisma-batches.check.ts saw no instance at start-up either). Prisma then sends both
 * requests' batched reads from the first caller's `process.nextTick`, in its transaction.
 *
 * Docs (docs/guides/prisma.md, "Prisma's batched reads"): "A client provided per request
 * (`scope: Scope.REQUEST`, say `base.$extends(...)` for the caller's tenant) has no instance at
 * start-up: the library takes it from the first idempotent request that resolves it, before its
 * handler runs." and "Nothing to write".
 *
 * Control: the same two requests without `@Idempotent()`: both `found: true`. And once
 * `keepPrismaBatchesPerRequest(prisma)` was called (the documented opt-in for clients the library
 * cannot see), keyed: both `found: true`. (Checked by hand: the same file with `durable: false`
 * passes all three, the request-scoped client taken before its handler as documented.)
 *
 * Severity: high (a read of another request's transaction: its answer stored and replayed; on a
 * SERIALIZABLE route the write skew the docs describe commits).
 *
 * Fails now: keyed, durable tenant client: one of the two answers `{ found: false }` (201).
 *
 * Suggested fix: in `keepRequestScopedBatches`, resolve the context id as Nest's injector does
 * (`contextId.getParent?.({ token: wrapper.token, isTreeDurable: wrapper.isDependencyTreeDurable() })
 * ?? contextId`) before `getInstanceByContextId`; or look at every context of the wrapper
 * (`wrapper.getValues?` / its `values` map) for a resolved Prisma client.
 *
 * Fixed: `keepRequestScopedBatches` (lib/prisma-request-clients.ts) looks each waiting
 * provider up under the context Nest's injector resolves it in (`contextOf`: the strategy's
 * `getParent({ token, isTreeDurable })`, the tenant's sub-tree for a durable provider), so a
 * durable Prisma client is found resolved before the handler runs and its batches are kept per
 * request (unit: lib/prisma-request-clients.spec.ts).
 */
import { Body, Controller, Inject, Injectable, Module, Post, Scope } from '@nestjs/common';
import { ContextIdFactory, type ContextIdStrategy } from '@nestjs/core';
import { type ContextId, type HostComponentInfo } from '@nestjs/core/injector/instance-wrapper.js';
import { PrismaPg } from '@prisma/adapter-pg';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent, keepPrismaBatchesPerRequest } from '../../../lib/index.js';
import { PrismaClient } from '../../examples/support/prisma-on-call/generated/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const PG_POOL = Symbol('PG_POOL');
let pool: Pool;

/** Nest's docs' strategy: one durable sub-tree per tenant (the `x-tenant` header). */
const tenants = new Map<string, ContextId>();
class AggregateByTenantContextIdStrategy implements ContextIdStrategy {
  attach(contextId: ContextId, req: { headers: Record<string, string | undefined> }) {
    const tenantId = req.headers['x-tenant'] ?? 'none';
    let tenantSubTreeId = tenants.get(tenantId);
    if (!tenantSubTreeId) {
      tenantSubTreeId = ContextIdFactory.create();
      tenants.set(tenantId, tenantSubTreeId);
    }
    const tenantTree = tenantSubTreeId;
    return {
      resolve: (info: HostComponentInfo) => (info.isTreeDurable ? tenantTree : contextId),
      payload: { tenantId },
    };
  }
}

@Injectable({ scope: Scope.REQUEST, durable: true })
class TenantPrisma extends PrismaClient {
  constructor(@Inject(PG_POOL) pool: Pool) {
    super({ adapter: new PrismaPg(pool) });
  }
}

/** The requests of `group` wait for each other, then read in one tick (bounded, never a hang). */
const groups = new Map<string, { arrived: number; met: Promise<void>; meet: () => void }>();
function together(group: string, count: number): Promise<void> {
  let entry = groups.get(group);
  if (!entry) {
    let meet = () => {};
    const met = new Promise<void>((resolve) => (meet = resolve));
    entry = { arrived: 0, met, meet };
    groups.set(group, entry);
  }
  if (++entry.arrived >= count) entry.meet();
  const bound = new Promise<void>((resolve) => setTimeout(resolve, 5_000).unref());
  return Promise.race([entry.met, bound]);
}

type Body77 = { group: string; name: string };

@Controller()
class RosterController {
  constructor(private readonly prisma: TenantPrisma) {}

  private async ownRead({ group, name }: Body77) {
    const { id } = await this.prisma.doctor.create({ data: { shift: group, name, onCall: true } });
    await together(group, 2);
    const row = await this.prisma.doctor.findUnique({ where: { id } });
    return { found: row?.id === id };
  }

  @Post('keyed')
  @Idempotent()
  keyed(@Body() body: Body77) {
    return this.ownRead(body);
  }

  @Post('plain')
  plain(@Body() body: Body77) {
    return this.ownRead(body);
  }

  /** Hands its client to the documented opt-in, for the last control. */
  @Post('opt-in')
  optIn() {
    keepPrismaBatchesPerRequest(this.prisma);
    return { ok: true };
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [RosterController],
  providers: [{ provide: PG_POOL, useFactory: () => pool }, TenantPrisma],
})
class RosterModule {}

describe('adversary 77: a durable (per-tenant) Prisma client, two requests reading at once', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    ContextIdFactory.apply(new AggregateByTenantContextIdStrategy());
    fixture = await startPoolApp('adv77_prisma_durable', {
      module: RosterModule,
      max: 6,
      usePool: (started) => {
        pool = started;
      },
      setup: async (admin) => {
        await admin.query(`CREATE TABLE doctors (
          id serial PRIMARY KEY, shift text NOT NULL, name text NOT NULL, on_call boolean NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const pair = async (path: string, group: string) => {
    const one = (name: string) => {
      const call = request(fixture.app.getHttpServer()).post(path).set('x-tenant', 'acme');
      if (path === '/keyed') call.set('Idempotency-Key', `${group}-${name}`);
      return call.send({ group, name });
    };
    const answers = await Promise.all([one('ada'), one('bob')]);
    return answers.map((answer) => ({ status: answer.status, body: answer.body as unknown }));
  };

  const bothFound = [
    { status: 201, body: { found: true } },
    { status: 201, body: { found: true } },
  ];

  it('control: without @Idempotent(): both requests find their own doctor', async () => {
    expect(await pair('/plain', 'plain')).toEqual(bothFound);
  }, 30_000);

  it('keyed: both requests find their own doctor, as without the library', async () => {
    expect(await pair('/keyed', 'keyed')).toEqual(bothFound);
  }, 30_000);

  it('control: keyed, once keepPrismaBatchesPerRequest(prisma) was called: both found', async () => {
    const optIn = await request(fixture.app.getHttpServer())
      .post('/opt-in')
      .set('x-tenant', 'acme');
    expect(optIn.status).toBe(201);
    expect(await pair('/keyed', 'opted-in')).toEqual(bothFound);
  }, 30_000);
});
