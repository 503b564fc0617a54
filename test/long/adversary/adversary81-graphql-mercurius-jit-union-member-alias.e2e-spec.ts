import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import {
  createUnionType,
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 81 (graphql): on Mercurius with `jit`, a retry that selects a middleware field of
 * a union's member under another alias (or without the first call's alias) is refused with
 * `field_not_stored` ("was not selected by the first call ... use a new key") once either
 * run is compiled: the first answer compiled stores no named key for it, a compiled replay
 * finds none. Without `jit`, and under jit for an object list, the same retry is replayed.
 *
 * The app: `Order { id methods: [Method!]! }`, `Method = Card | Bank` (Nest's
 * `createUnionType`), `label` of each member behind Nest's field middleware `upper`;
 * `createOrder` with `@Idempotent()`; Mercurius on Fastify with `jit: 1` (compiles a
 * document from its second run). The first call selects `... on Card { t: label } ... on Bank
 * { t: label }`; the retry (another client build) `... on Card { label } ... on Bank { label }`,
 * sent twice (its second run compiled; a busy app has every document compiled).
 *
 * Why: a field's named key is read from `info.path` (`namedStepsOf`, lib/graphql/
 * named-path.ts), each step's type from its `typename`; graphql-jit's paths carry none, and the
 * fallback (`told`, the parent field's named type) is the union `Method`, not an object type,
 * so `namedSteps` returns undefined: the first answer (compiled) stores no `names` for it, and
 * a compiled replay has no named key to look up (`outputAt` -> `unstored` ->
 * `notStoredField`, lib/graphql/middleware-outputs.ts).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A retry that selects such a field under
 * another alias (or without the first call's alias) gets the first call's output of it:
 * outputs are found by their fields' names and arguments too"; the library's support of
 * Mercurius with `jit` ("Under Mercurius' `jit`, whose compiled run (a document's second, a
 * replay's as a rule) ...").
 *
 * Control (passes): the same alias change on a list of objects (`lines { a: label }` then
 * `lines { label }`), replayed compiled too.
 *
 * Severity: medium (an honest retry is refused on the fields and its whole answer nulled
 * (`label` is non-null, the list's items too), and told to use a new key, which runs the
 * mutation again; only under `jit`, only once compiled, so it shows up in production).
 *
 * Fails now: the compiled retry answers `createOrder: null` with `field_not_stored` at
 * `createOrder.methods.0.label`.
 *
 * Suggested fix: tell each step's type where graphql-jit gives no `typename`: from the value
 * (the member the union's `resolveType()` told for that path, noted by the library), or by
 * matching the response key against each possible type's selection (the member whose
 * selection holds that response key for the field).
 *
 * Fixed: `namedSteps` (lib/graphql/named-path.ts) names a step without a `typename` under a union
 * or interface by the members whose selections give that response key, where they all name the same
 * field and arguments.
 */
let pool: Pool;

/** Nest's field middleware: the text in capitals. */
const upper: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string | null;
  return value === null ? null : value.toUpperCase();
};

@ObjectType()
class Card {
  @Field({ middleware: [upper] })
  label!: string;

  @Field()
  last4!: string;
}

@ObjectType()
class Bank {
  @Field({ middleware: [upper] })
  label!: string;

  @Field()
  iban!: string;
}

const Method = createUnionType({
  name: 'Method',
  types: () => [Card, Bank] as const,
  resolveType: (value: { last4?: string }) => (value.last4 ? Card : Bank),
});

@ObjectType()
class Line {
  @Field({ middleware: [upper] })
  label!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Method])
  methods!: (typeof Method)[];

  @Field(() => [Line])
  lines!: Line[];
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
    return {
      id: rows[0].id,
      methods: [
        { label: 'visa', last4: '4242' },
        { label: 'sepa', iban: 'DE2' },
      ] as (typeof Method)[],
      lines: [{ label: 'pen' }, { label: 'ink' }],
    };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<MercuriusDriverConfig>({
      driver: MercuriusDriver,
      autoSchemaFile: true,
      graphiql: false,
      jit: 1,
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 81: Mercurius jit, a union member middleware field under another alias', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_jit_union_alias', {
      module: OrdersModule,
      max: 6,
      adapter: 'fastify',
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

  it('control: an object list under another alias, replayed compiled', async () => {
    const first = await post('adv81-jit-lines', 'mutation { createOrder { lines { a: label } } }');
    expect(first.body).toEqual({
      data: { createOrder: { lines: [{ a: 'PEN' }, { a: 'INK' }] } },
    });
    for (let i = 0; i < 2; i++) {
      const again = await post('adv81-jit-lines', 'mutation { createOrder { lines { label } } }');
      expect(again.body).toEqual({
        data: { createOrder: { lines: [{ label: 'PEN' }, { label: 'INK' }] } },
        extensions: replayed,
      });
    }
  });

  it('the union members under another alias, replayed compiled', async () => {
    const first = await post(
      'adv81-jit-union',
      'mutation { createOrder { methods { ... on Card { t: label } ... on Bank { t: label } } } }',
    );
    expect(first.body).toEqual({
      data: { createOrder: { methods: [{ t: 'VISA' }, { t: 'SEPA' }] } },
    });
    for (let i = 0; i < 2; i++) {
      const again = await post(
        'adv81-jit-union',
        'mutation { createOrder { methods { ... on Card { label } ... on Bank { label } } } }',
      );
      // Fails at i = 1 (compiled): createOrder null, field_not_stored at methods.0.label.
      expect(again.body).toEqual({
        data: { createOrder: { methods: [{ label: 'VISA' }, { label: 'SEPA' }] } },
        extensions: replayed,
      });
    }
  });
});
