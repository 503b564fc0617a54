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
 * Adversary 82 (graphql): on Mercurius with `jit`, a retry whose union members give one alias
 * to other middleware fields than the first call did is answered each field with another
 * field's stored output, and no error: `... on Card { x: label y: note } ... on Bank { x: note
 * y: label }` first, then `... on Card { x: note y: label } ... on Bank { x: label y: note }`
 * replays the Card's `x` (now its `note`) with its stored `label`, and so on. Without `jit`
 * (graphql-js, which tells each step's member in `info.path.typename`), the same retry is
 * replayed right (checked with `jit: 0`).
 *
 * The app: a union `Method = Card | Bank`, each member with `label` and `note` behind Nest's
 * field middleware `upper`; `createOrder` with `@Idempotent()` answers a list of methods;
 * Mercurius with `jit: 1` (the docs' Mercurius set-up names `jit`). A client (a code generator
 * that names its aliases by position, a UI that shows "title"/"subtitle" per member) sends the
 * first operation, and its retry after a deploy that switched which field is the title.
 *
 * Why: under `jit`, graphql-jit gives no `typename` in `info.path`, so `namedSteps`
 * (lib/graphql/named-path.ts:62-76) names a step under a union by all its members, and gives
 * up (undefined) where members select the same response key as different fields (`x` is
 * `Card.note` and `Bank.label` in the retry). The compiled replay then has no named key to
 * look the field up by, and `storedKeyFor` (lib/graphql/output-paths.ts:518-521) falls back
 * to the response key `methods.0.x`, which holds `Card.label`'s output, and answers it for
 * `Card.note`: it refuses that key only where the replay's named key is known and differs.
 * The same happens where the first answer ran interpreted and stored its named keys (checked:
 * the first call under a document of its own); a first answer run compiled stores none for
 * those outputs either (`noteMiddlewarePath`, output-paths.ts:173).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A retry that selects such a field under
 * another alias (or without the first call's alias) gets the first call's output of it:
 * outputs, and the fields inside an output of object type, are found by their fields' names
 * and arguments first (a retry that gives the first call's aliases to other fields gets each
 * field its own value), as the mutation's own values are; under Mercurius' `jit` too, a
 * union's members included."
 *
 * Control (passes): the same operation replayed compiled.
 *
 * Severity: high (a replay answers a field with another field's value, silently: a card's
 * note shown as its label; with fields of other types, a value of the wrong type or meaning).
 *
 * Fails now: the compiled retry answers `methods: [{ x: 'VISA', y: 'CARD NOTE' }, { x: 'BANK
 * NOTE', y: 'SEPA' }]` (the first call's answer by response key) for the swapped selection.
 *
 * Suggested fix: under `jit`, tell the member of each step under an abstract type another way
 * (the member noted by the `resolveType()` wrapper at that path, `first.members` / the stored
 * `members`, which is known before the member's fields resolve), and name the step by that
 * member's selection; where a step still cannot be named, never fall back to a response key
 * whose first-answer field is unknown: refuse (`field_not_stored`) rather than answer another
 * field's output.
 *
 * Fixed: the middleware wrapper, put on one object type's field, names its field's own step by
 * that type where the driver tells no `typename` (`namedStepsOf(graphql, info, type.name)`,
 * lib/graphql/named-path.ts, from lib/graphql/middleware-outputs.ts): a union member's
 * middleware field is named by its member's selection at the first answer and on the replay,
 * compiled or not, so each field is found by its own named key. Not done: a step above it under
 * a union (a middleware field inside an object field of a member) is still named by all
 * members, and a replay that cannot name it falls back to its response key.
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

  @Field({ middleware: [upper] })
  note!: string;

  @Field()
  last4!: string;
}

@ObjectType()
class Bank {
  @Field({ middleware: [upper] })
  label!: string;

  @Field({ middleware: [upper] })
  note!: string;

  @Field()
  iban!: string;
}

const Method = createUnionType({
  name: 'Method',
  types: () => [Card, Bank] as const,
  resolveType: (value: { last4?: string }) => (value.last4 ? Card : Bank),
});

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Method])
  methods!: (typeof Method)[];
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
        { label: 'visa', note: 'card note', last4: '4242' },
        { label: 'sepa', note: 'bank note', iban: 'DE2' },
      ] as (typeof Method)[],
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

const FIRST =
  'mutation { createOrder { methods { ' +
  '... on Card { x: label y: note } ... on Bank { x: note y: label } } } }';
const SWAPPED =
  'mutation { createOrder { methods { ' +
  '... on Card { x: note y: label } ... on Bank { x: label y: note } } } }';

describe('adversary 82: Mercurius jit, one alias on other fields of union members', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv82_gql_jit_union_swap', {
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

  it('control: the same operation, replayed compiled', async () => {
    const first = await post('adv82-jit-same', FIRST);
    expect(first.body).toEqual({
      data: {
        createOrder: {
          methods: [
            { x: 'VISA', y: 'CARD NOTE' },
            { x: 'BANK NOTE', y: 'SEPA' },
          ],
        },
      },
    });
    for (let i = 0; i < 3; i++) {
      const again = await post('adv82-jit-same', FIRST);
      expect(again.body).toEqual({ ...first.body, extensions: replayed });
    }
  });

  it('the retry swaps which member field the alias names: each its own output', async () => {
    // Both documents compiled by now or soon (jit: 1), as in a busy app.
    for (const [i, query] of [FIRST, FIRST, SWAPPED, SWAPPED].entries()) {
      await post(`adv82-jit-warm-${i}`, query);
    }
    const first = await post('adv82-jit-swap', FIRST);
    expect(first.body).toEqual({
      data: {
        createOrder: {
          methods: [
            { x: 'VISA', y: 'CARD NOTE' },
            { x: 'BANK NOTE', y: 'SEPA' },
          ],
        },
      },
    });
    for (let i = 0; i < 3; i++) {
      const again = await post('adv82-jit-swap', SWAPPED);
      // Fails: methods [{ x: 'VISA', y: 'CARD NOTE' }, { x: 'BANK NOTE', y: 'SEPA' }].
      expect(again.body).toEqual({
        data: {
          createOrder: {
            methods: [
              { x: 'CARD NOTE', y: 'VISA' },
              { x: 'SEPA', y: 'BANK NOTE' },
            ],
          },
        },
        extensions: replayed,
      });
    }
  });
});
