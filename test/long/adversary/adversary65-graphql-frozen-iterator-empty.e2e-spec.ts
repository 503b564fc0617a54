import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 65: a frozen mutation value (an immutable value object, `Object.freeze(this)`
 * in its constructor, as in adversary 62) whose list field is a one-shot iterator (a `Map`'s
 * `values()`, a generator: GraphQL takes any iterable for a list) answers that list EMPTY at
 * its first answer, while the store holds its items and every replay answers them. Without
 * the library the app answers the items.
 *
 * The app (Apollo on Express, Mercurius on Fastify; the pool seam):
 *
 *   @ObjectType() class Basket {
 *     @Field(() => Int) readonly id: number;
 *     @Field(() => [String]) readonly items: Iterable<string>;
 *     constructor(id, lines: Map<string, string>) { this.id = id; this.items = lines.values();
 *       Object.freeze(this); }
 *   }
 *
 * What happens: storing reads the iterator once (`materialized`, lib/graphql/wire-value.ts:
 * 1002-1015) and stores its items; the field is "replaced" (wire-value.ts:386-392), but
 * `over()` skips a field the value holds frozen (a non-writable, non-configurable own data
 * property, wire-value.ts:556: a Proxy may not answer it otherwise) and, `given` left
 * empty, gives the first answer the resolver's value itself (wire-value.ts:559). Its `items`
 * is the iterator storing already drained: GraphQL's `completeListValue` reads nothing and the
 * first answer is `items: []`. The doc's "a field it holds frozen is given as it holds it"
 * holds of a Promise or an array, which read again the same, not of an iterator. A retry
 * replays the stored items.
 *
 * Expected: "A list GraphQL takes as any iterable: a generator or a `Map`'s `values()` is read
 * once, and the first answer is given the list that was read and stored" (docs/guides/
 * graphql.md, "What is stored, and replayed"); first answer and replay the same bytes but the
 * replay marker: `items: ["apple", "pear"]` both times, as without the library.
 *
 * Controls: the same basket not frozen (the Proxy answers the list read): the first answer and
 * its replay are the items; the frozen basket without `@Idempotent()`: the items. All pass on
 * both drivers; so does the frozen basket's replay.
 *
 * Severity: medium (a committed mutation's first answer silently drops a list the store holds:
 * the client acts on an empty basket, and a retry says otherwise).
 *
 * Fixed: the Proxy's target is a stand-in of the value's class, so a frozen value's fields are
 * answered too (the iterator's items as they were read).
 */
let pool: Pool;

const LINES: [string, string][] = [
  ['a1', 'apple'],
  ['p2', 'pear'],
];

@ObjectType()
class Basket {
  @Field(() => Int)
  readonly id: number;

  @Field(() => [String])
  readonly items: Iterable<string>;

  constructor(id: number, lines: Map<string, string>, frozen: boolean) {
    this.id = id;
    this.items = lines.values();
    if (frozen) Object.freeze(this);
  }
}

async function insert(name: string): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO baskets (name) VALUES ($1) RETURNING id',
    [name],
  );
  return rows[0].id;
}

@Resolver()
class BasketsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Basket)
  @Idempotent()
  async createBasket(@Args('name') name: string): Promise<Basket> {
    return new Basket(await insert(name), new Map(LINES), true);
  }

  /** The same, not frozen. */
  @Mutation(() => Basket)
  @Idempotent()
  async createOpenBasket(@Args('name') name: string): Promise<Basket> {
    return new Basket(await insert(name), new Map(LINES), false);
  }

  /** The frozen one without @Idempotent(): what the app answers without the library. */
  @Mutation(() => Basket)
  async createBasketUnkeyed(@Args('name') name: string): Promise<Basket> {
    return new Basket(await insert(name), new Map(LINES), true);
  }
}

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
      });
}

describe.each(GRAPHQL_DRIVERS)(
  'adversary 65: a frozen value with a one-shot iterator list, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [BasketsResolver],
      })
      class BasketsModule {}
      fixture = await startPoolApp(`adv65_frozen_iter_${driver}`, {
        module: BasketsModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE baskets (id serial PRIMARY KEY, name text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    const send = (key: string, query: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .timeout(5_000)
        .send({ query });
    const rows = async (name: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM baskets WHERE name = $1', [name])).rows[0]
          .count,
      );

    async function firstAndReplay(field: 'createBasket' | 'createOpenBasket', name: string) {
      const query = `mutation { ${field}(name: "${name}") { id items } }`;
      const first = await send(name, query);
      const replay = await send(name, query);
      return { first: first.body as object, replay: replay.body as object, rows: await rows(name) };
    }

    const basket = (field: string) => ({
      data: { [field]: { id: expect.any(Number), items: ['apple', 'pear'] } },
    });

    it('control: not frozen: the first answer and its replay are the items', async () => {
      const name = `${driver}-open`;
      const { first, replay, rows } = await firstAndReplay('createOpenBasket', name);
      expect(first).toEqual(basket('createOpenBasket'));
      expect(replay).toEqual({
        ...first,
        extensions: { idempotency: { replayed: ['createOpenBasket'] } },
      });
      expect(rows).toBe(1);
    });

    it('control: the frozen basket without @Idempotent(): the items', async () => {
      const name = `${driver}-unkeyed`;
      const answer = await send(
        name,
        `mutation { createBasketUnkeyed(name: "${name}") { id items } }`,
      );
      expect(answer.body).toEqual(basket('createBasketUnkeyed'));
    });

    it('frozen: the first answer is the items, as its replay is', async () => {
      const name = `${driver}-frozen`;
      const { first, replay, rows } = await firstAndReplay('createBasket', name);
      // The replay answers the stored items.
      expect(replay).toEqual({
        ...basket('createBasket'),
        extensions: { idempotency: { replayed: ['createBasket'] } },
      });
      expect(first).toEqual(basket('createBasket'));
      expect(rows).toBe(1);
    });
  },
);
