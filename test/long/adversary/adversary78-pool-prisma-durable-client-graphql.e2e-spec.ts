/**
 * Adversary 78 (pool, Prisma, GraphQL): the durable per-tenant Prisma client that adversary 77
 * fixed for HTTP routes (`@Injectable({ scope: Scope.REQUEST, durable: true })` under Nest's
 * docs' `ContextIdStrategy`, one client per tenant shared by the tenant's requests) is still
 * never found on a GraphQL operation: two idempotent mutations of one tenant that each write
 * a row and read it back with `findUnique` at the same moment have their reads batched into ONE
 * query, sent in the first mutation's transaction; the second does not see its own row and
 * answers (and stores, and replays) `false`. Without `@Idempotent()`: both `true`.
 *
 *   @Injectable({ scope: Scope.REQUEST, durable: true })
 *   class TenantPrisma extends PrismaClient {
 *     constructor(@Inject(PG_POOL) pool: Pool) { super({ adapter: new PrismaPg(pool) }); }
 *   }
 *   ContextIdFactory.apply(new AggregateByTenantContextIdStrategy()); // reads (ctx.req ?? req).headers
 *   @Mutation(() => Boolean) @Idempotent()
 *   async keyedRead(@Args('name') name: string) {
 *     const { id } = await this.prisma.doctor.create({ data: { … } });
 *     return (await this.prisma.doctor.findUnique({ where: { id } }))?.id === id;
 *   }
 *
 * Why: `keepRequestScopedBatches` (lib/prisma-request-clients.ts) reads the request's context
 * id off `graphql.req` (`requestOf`) and returns at once when that object has no
 * `REQUEST_CONTEXT_ID`. @nestjs/graphql keeps the context id on the GraphQL context object,
 * not on `req` (resolvers-explorer.service.js: `ContextIdFactory.getByRequest(gqlContext,
 * ['req'])`, then `Object.defineProperty(gqlContext, REQUEST_CONTEXT_ID, …)`; seen here:
 * `ctx[REQUEST_CONTEXT_ID]` set, `ctx.req[REQUEST_CONTEXT_ID]` not), and the HTTP request
 * behind `/graphql` never went through Nest's router. So on a GraphQL operation no
 * request-scoped client is ever looked at (the new `contextOf` never runs), and the tenant's
 * one client's DataLoader sends both reads from the first caller's tick, in its transaction.
 * (A plain request-scoped client, one instance per request, batches nothing across requests:
 * it holds. An app whose HTTP route resolved the client first is covered too: the hold is per
 * DataLoader class.)
 *
 * Docs: docs/guides/prisma.md ("Prisma's batched reads"): "A client provided per request
 * (`scope: Scope.REQUEST`, …) has no instance at start-up: the library takes it from the first
 * idempotent request that resolves it, before its handler runs", "Nothing to write"; commit
 * c47bd1e: "a durable (per-tenant) request-scoped Prisma client is looked up in its tenant's
 * sub-tree, as Nest resolves it"; docs/guides/graphql.md: a keyed mutation is an idempotent
 * request.
 *
 * Severity: high (a read of another request's transaction: its wrong answer stored and
 * replayed; on a GraphQL-only app with per-tenant clients, every such pair).
 *
 * Failed before the fix: keyed: one of the two mutations answers `keyedRead: false`. Control: the same two
 * mutations without `@Idempotent()`: both `true`.
 *
 * Suggested fix: in `keepRequestScopedBatches`, for GraphQL take the context id as
 * @nestjs/graphql does: `ContextIdFactory.getByRequest(gqlContext, ['req'])` on
 * `context.getArgs()[2]` (check `gqlContext[REQUEST_CONTEXT_ID] ?? gqlContext.req?.[…]`),
 * then `contextOf`.
 *
 * Fixed: `keepRequestScopedBatches` (lib/prisma-request-clients.ts, `requestOf`) reads the
 * context id from the GraphQL context object when @nestjs/graphql put it there, else from its
 * `req`, then `contextOf` finds the tenant's durable client.
 */
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Inject, Injectable, Module, Scope } from '@nestjs/common';
import { ContextIdFactory, type ContextIdStrategy } from '@nestjs/core';
import { type ContextId, type HostComponentInfo } from '@nestjs/core/injector/instance-wrapper.js';
import { Args, GraphQLModule, Mutation, Query, Resolver } from '@nestjs/graphql';
import { PrismaPg } from '@prisma/adapter-pg';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { PrismaClient } from '../../examples/support/prisma-on-call/generated/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

const PG_POOL = Symbol('PG_POOL');
let pool: Pool;

/** Nest's docs' strategy: one durable sub-tree per tenant (the `x-tenant` header). */
const tenants = new Map<string, ContextId>();
class AggregateByTenantContextIdStrategy implements ContextIdStrategy {
  attach(contextId: ContextId, request: Record<string, unknown>) {
    // Over HTTP Nest hands the request; over GraphQL the GraphQL context, whose `req` it is.
    const req = (request.req ?? request) as { headers?: Record<string, string | undefined> };
    const tenantId = req.headers?.['x-tenant'] ?? 'none';
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
  constructor(@Inject(PG_POOL) started: Pool) {
    super({ adapter: new PrismaPg(started) });
  }
}

/** The operations of `group` wait for each other, then read in one tick (bounded). */
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

@Resolver()
class RosterResolver {
  constructor(private readonly prisma: TenantPrisma) {}

  private async ownRead(group: string, name: string) {
    const { id } = await this.prisma.doctor.create({ data: { shift: group, name, onCall: true } });
    await together(group, 2);
    const row = await this.prisma.doctor.findUnique({ where: { id } });
    return row?.id === id;
  }

  @Query(() => Boolean)
  ping() {
    return true;
  }

  @Mutation(() => Boolean)
  @Idempotent()
  keyedRead(@Args('group') group: string, @Args('name') name: string) {
    return this.ownRead(group, name);
  }

  @Mutation(() => Boolean)
  plainRead(@Args('group') group: string, @Args('name') name: string) {
    return this.ownRead(group, name);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [{ provide: PG_POOL, useFactory: () => pool }, TenantPrisma, RosterResolver],
})
class RosterModule {}

describe('adversary 78: a durable per-tenant Prisma client in a GraphQL resolver, two reads at once', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    ContextIdFactory.apply(new AggregateByTenantContextIdStrategy());
    fixture = await startPoolApp('adv78_prisma_graphql_durable', {
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

  const pair = async (field: 'keyedRead' | 'plainRead', group: string) => {
    const one = (name: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', `${group}-${name}`)
        .set('x-tenant', 'acme')
        .timeout(20_000)
        .send({ query: `mutation { ${field}(group: "${group}", name: "${name}") }` });
    const answers = await Promise.all([one('ada'), one('bob')]);
    return answers.map((answer) => (answer.body as { data?: Record<string, unknown> }).data);
  };

  it('control: without @Idempotent(): both operations find their own doctor', async () => {
    expect(await pair('plainRead', 'plain')).toEqual([{ plainRead: true }, { plainRead: true }]);
  }, 30_000);

  it('keyed: both operations find their own doctor, as without the library', async () => {
    expect(await pair('keyedRead', 'keyed')).toEqual([{ keyedRead: true }, { keyedRead: true }]);
  }, 30_000);
});
