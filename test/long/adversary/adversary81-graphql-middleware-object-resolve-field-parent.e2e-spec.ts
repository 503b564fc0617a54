import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 81 (graphql): a `@ResolveField()` under a middleware field of object type reads,
 * on a replay, a parent rebuilt from the first *answer*: the parent's own data it computes
 * from (a column no client selects) is gone, so the replay answers
 * `label: 'undefined (undefined)'` where the first answer had `'Main St 1 (NL)'`.
 *
 * The app: `Order { id shipping: Address billing: Address }`, `Address { street label }`
 * with `countryCode` a plain property (no `@Field()`: the entity's column), and
 * `label` a `@ResolveField()` that formats `${street} (${countryCode})` from its parent (the
 * docs' advice: field resolvers for reads, "a computed label"); `shipping` behind Nest's field
 * middleware `audit` (an access check or a log that passes the value on; or the global
 * `fieldMiddleware`); `createOrder` with `@Idempotent()`; Apollo on Express. The client
 * selects `shipping { label }`.
 *
 * Why: a replayed middleware field answers `outputValue(...)` (lib/graphql/
 * middleware-outputs.ts): a plain object of the selected fields as the answer wrote them
 * (`value[name] = item`), which is then the parent of the fields under it. A field the app
 * resolves runs again on the replay (`fieldResolution` 'app') with that parent: `street`
 * and `countryCode` were never in the answer (not selected, not a field), so the resolver
 * reads undefined; where `street` is selected it gets the answer's street, but `countryCode`
 * stays undefined. The mutation's own stored value keeps a resolved field's parent's own data
 * (the control), the middleware output does not.
 *
 * Docs (docs/guides/graphql.md): "A selected field that has a `@ResolveField()` is that
 * resolver's, on a replay too: the parent's own data of that name is its input, kept as it
 * is"; "Its parent keeps its unselected own data, the field its raw input; a retry that
 * selects it is never refused" (resolved-fields.ts, on `app` fields); "a replay answers that
 * output".
 *
 * Control (passes): `billing { label }`, the same type without middleware: replayed as
 * `'Main St 1 (NL)'`.
 *
 * Severity: high (a replay answers a different value with no error, every time: a label, a
 * price computed from the parent's columns, a relation loaded by the parent's foreign key:
 * `null` or an error where the first answer had the object).
 *
 * Failed (before the fix): the replay answered `shipping: { label: 'undefined (undefined)' }`.
 *
 * Suggested fix: under a middleware output, keep the parent's own data for the fields the
 * app resolves, as for the mutation's own value (store the input the middleware's `next()`
 * gave, with its unselected own data, where a field below it has a resolver of the app's),
 * or answer the resolved field's stored output rather than running it on a rebuilt parent.
 *
 * Fixed: at the first answer, each field the app resolves notes its parent's own data where
 * that parent is inside a middleware field's output (a wrapper put on with the middleware
 * fields' in `answerOutputsOf`, `keepAppParentsOf`; `noteAppParent`, lib/graphql/
 * output-paths.ts; the data as typed JSON, `keptParent`, lib/graphql/app-parents.ts), stored
 * with the outputs (`StoredOutputs.parents`); a replay's `outputValue` rebuilds that parent
 * from it, the selected fields over it, the app field's own name left as its raw input;
 * commit "graphql: a live first call's slow middleware waited for; an app field's parent kept
 * inside a middleware output".
 */
let pool: Pool;

/** Nest's field middleware that passes the value on (an access check, a log). */
const audit: FieldMiddleware = async (_ctx, next) => next();

@ObjectType()
class Address {
  @Field()
  street!: string;

  /** The entity's column, not a field of the type. */
  countryCode!: string;

  @Field()
  label?: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Address, { middleware: [audit] })
  shipping!: Address;

  @Field(() => Address)
  billing!: Address;
}

@Resolver(() => Address)
class AddressResolver {
  /** A computed label, read from its parent. */
  @ResolveField(() => String)
  label(@Parent() address: Address): string {
    return `${address.street} (${address.countryCode})`;
  }
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const address = { street: 'Main St 1', countryCode: 'NL' };
    return { id: rows[0].id, shipping: { ...address }, billing: { ...address } };
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
  providers: [OrdersResolver, AddressResolver],
})
class OrdersModule {}

describe('adversary 81: a @ResolveField() under a middleware field of object type', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_mw_obj_resolve', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const replayed = { idempotency: { replayed: ['createOrder'] } };

  it('control: without middleware, the label computed from the kept parent', async () => {
    const query = 'mutation { createOrder { billing { label } } }';
    const first = await post('adv81-obj-resolve-ok', query);
    expect(first.body).toEqual({ data: { createOrder: { billing: { label: 'Main St 1 (NL)' } } } });
    const again = await post('adv81-obj-resolve-ok', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });

  it('behind field middleware: the same label on the replay', async () => {
    const query = 'mutation { createOrder { shipping { label } } }';
    const first = await post('adv81-obj-resolve-mw', query);
    expect(first.body).toEqual({
      data: { createOrder: { shipping: { label: 'Main St 1 (NL)' } } },
    });
    const again = await post('adv81-obj-resolve-mw', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });
});
