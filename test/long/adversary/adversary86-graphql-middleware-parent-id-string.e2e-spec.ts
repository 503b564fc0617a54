import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
  GraphQLModule,
  ID,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { createHash } from 'node:crypto';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 86 (graphql): a `@ResolveField()` whose parent sits inside a field-middleware
 * output reads the parent's numeric key, a column the schema exposes as `ID`
 * (`@Field(() => ID) id: number`, the usual entity), and the operation selects it. At the
 * first answer the resolver reads `id: 7` (a number); on a replay the library lays the
 * answer's `"7"` (ID's wire form, through `ID.parseValue`, a string) over the kept own data, and
 * the resolver reads `id: "7"`: `nextSeat` answers `71` where the first answer said `8`; a
 * resolver that queries with it (`prisma.seat.findMany({ where: { rowId: row.id } })`) fails.
 *
 * User code: `Order.row: Row` behind Nest's field middleware `visible`; `Row { @Field(() => ID)
 * id: number }`; `@ResolveField(() => Int) nextSeat(@Parent() row) { return row.id + 1 }`;
 * `createOrder` with `@Idempotent()`; Apollo on Express.
 *
 * Code path: lib/graphql/middleware-outputs.ts `outputValue`: `value = parentData(kept)` (the
 * raw `id: 7`), then every selected non-app field is set from the stored answer
 * (`value[name] = item`, a leaf through `type.parseValue(wire)`: `ID.parseValue("7")` is
 * `"7"`), over the kept raw value.
 *
 * Docs (docs/guides/graphql.md): "A `@ResolveField()` under a middleware field of object type
 * reads, on a replay, a parent rebuilt from the answer with the own data it had at the first
 * answer (kept then: its plain data properties, typed ...), the selected fields over it as the
 * answer wrote them"; replays answer the first answer byte for byte.
 *
 * Severity: medium: a replay of a committed order answers other data than the first answer
 * (here a wrong seat number), silently.
 *
 * Fails now: replay `nextSeat: 71` (first answer `8`). The same lay-over with a field behind its
 * own middleware (`email` masked for callers, `contactKey` an md5 of the parent's raw email, as a
 * gravatar URL is): the replay's resolver hashes the masked `a***@example.com` (second failing
 * test).
 * Control (passes): the same operation without selecting `id` (the kept raw number is read).
 *
 * Suggested fix: where the parent's own data was kept, keep its raw value for a selected leaf
 * whose scalar does not give it back (`keepsExactly`-style check of `parseValue(serialize(x))`
 * against `x`), i.e. lay the answer over the kept data only where the kept data lacks the
 * field.
 *
 * Fixed (session of 2026-12-06, third): `outputValue` (lib/graphql/middleware-outputs.ts) keeps
 * the kept own data of a selected field where the answer is no other value of it
 * (lib/graphql/kept-member.ts `keepsOwnMember`, table-driven spec beside it): a leaf, or a list
 * of leaves, read as a property that GraphQL writes from the kept value as the answer holds
 * it (`ID.serialize(7)` is the stored `"7"`: the resolver reads `7`), and a field behind its own
 * middleware (the kept raw email is the middleware's input; its output is answered at its own
 * place). Objects, nulls (maybe errors) and values written otherwise stay the answer's.
 * Docs: docs/guides/graphql.md, "Field middleware".
 */
let pool: Pool;

/** Nest's field middleware: the row as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const row = (await next()) as Row;
  return { ...row };
};

/** Nest's field middleware: an email as callers see it. */
const masked: FieldMiddleware = async (_ctx, next) => {
  const email = (await next()) as string;
  return email.replace(/^(.).*@/, '$1***@');
};

@ObjectType()
class Row {
  @Field(() => ID)
  id!: number;

  @Field()
  name!: string;

  /** The owner's email, masked for callers by its own field middleware. */
  @Field({ middleware: [masked] })
  email!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Row, { middleware: [visible] })
  row!: Row;
}

@Resolver(() => Row)
class RowResolver {
  @ResolveField(() => Int)
  nextSeat(@Parent() row: Row): number {
    return row.id + 1;
  }

  @ResolveField(() => String)
  contactKey(@Parent() row: Row): string {
    return createHash('md5').update(row.email).digest('hex');
  }
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, row: { id: 7, name: 'G', email: 'ada@example.com' } };
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
  providers: [OrdersResolver, RowResolver],
})
class OrdersModule {}

describe('adversary 86: an app field under a middleware output reads its parent ID', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv86_gql_mw_parent_id', {
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

  const replayOf = async (key: string, query: string) => {
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.errors).toBeUndefined();
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  };

  it('control: the parent id and email not selected: the replay is the first answer', async () => {
    await replayOf(
      'adv86-id-unselected',
      'mutation { createOrder { id row { name nextSeat contactKey } } }',
    );
  });

  it('the parent id selected: the replay is the first answer', async () => {
    await replayOf('adv86-id-selected', 'mutation { createOrder { id row { id name nextSeat } } }');
  });

  it('the parent masked email selected: the replay is the first answer', async () => {
    await replayOf(
      'adv86-email-selected',
      'mutation { createOrder { id row { email contactKey } } }',
    );
  });
});
