import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
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
 * Adversary 99 (graphql), the class of adversary99-graphql-prototype-key-*: a parent's data
 * keyed `prototype`, `constructor` or `__proto__` (own keys, as `JSON.parse` makes them), at
 * the top of a non-field column, nested, in an array, in a `Map`, in an instance of a class,
 * read by a `@ResolveField()` both as non-field data (`__parent`) and as a field's raw input
 * (`__kept`). Each first answer is the handler's, and its replay the same.
 *
 * Fixed (session of 2026-12-06, sixth): written with the fix (lib/graphql/kept-data.ts
 * escapes the keys superjson refuses, reversibly).
 */
let pool: Pool;

class Doc {
  constructor(readonly body: Record<string, unknown>) {}
}

/** `key` as an own key of a new object (`__proto__` too), with `value`. */
const own = (key: string, value: unknown): Record<string, unknown> =>
  JSON.parse(`{${JSON.stringify(key)}: ${JSON.stringify(value)}, "z": 1}`) as Record<
    string,
    unknown
  >;

/** The data in each place, by its name. */
const PLACES: Record<string, (key: string) => unknown> = {
  top: (key) => own(key, 'Bob'),
  nested: (key) => ({ a: { b: own(key, { c: 1 }) } }),
  array: (key) => [own(key, 1), own(key, 2)],
  map: (key) => new Map([['m', own(key, 'x')]]),
  instance: (key) => new Doc(own(key, 'y')),
};

/** The own keys at every depth, in their order (what the resolvers answer). */
function keysOf(value: unknown): string {
  if (value instanceof Map) return `Map(${[...value].map(([k, v]) => `${k}:${keysOf(v)}`)})`;
  if (Array.isArray(value)) return `[${value.map(keysOf).join(',')}]`;
  if (typeof value !== 'object' || value === null) return JSON.stringify(value);
  // An instance of a class comes back as its data (documented): its keys alone are told.
  return `{${Object.entries(value)
    .map(([k, v]) => `${k}:${keysOf(v)}`)
    .join(',')}}`;
}

@ObjectType()
class Record99 {
  @Field(() => Int)
  id!: number;

  /** Not a field: read by `columnKeys`. */
  column?: unknown;

  /** The raw input of `inputKeys`. */
  inputKeys?: unknown;
}

@Resolver(() => Record99)
class RecordsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Record99)
  @Idempotent()
  async createRecord(@Args('key') key: string, @Args('place') place: string): Promise<Record99> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO records DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, column: PLACES[place](key), inputKeys: PLACES[place](key) };
  }

  @ResolveField(() => String)
  columnKeys(@Parent() record: Record99): string {
    return keysOf(record.column);
  }

  @ResolveField(() => String, { name: 'inputKeys' })
  inputKeysOf(@Parent() record: Record99): string {
    return keysOf(record.inputKeys);
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
  providers: [RecordsResolver],
})
class RecordsModule {}

describe('adversary 99: keys superjson refuses, in every place of a kept parent', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv99_gql_prototype_table', {
      module: RecordsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE records (id serial PRIMARY KEY)');
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

  const count = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM records')).rows[0].n;

  const cases = ['prototype', 'constructor', '__proto__'].flatMap((key) =>
    Object.keys(PLACES).map((place) => [key, place] as const),
  );

  it.each(cases)('the key %s (%s) is kept, and replayed', async (key, place) => {
    const query =
      `mutation { createRecord(key: ${JSON.stringify(key)}, place: "${place}") ` +
      '{ id columnKeys inputKeys } }';
    const idempotencyKey = `adv99-proto-table-${key}-${place}`;
    const before = await count();
    const firstAnswer = await post(idempotencyKey, query);
    const again = await post(idempotencyKey, query);
    expect(firstAnswer.body.errors).toBeUndefined();
    const expected = keysOf(PLACES[place](key));
    expect(expected).toContain(key);
    expect(firstAnswer.body.data.createRecord.columnKeys).toBe(expected);
    expect(firstAnswer.body.data.createRecord.inputKeys).toBe(expected);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { idempotency: { replayed: ['createRecord'] } },
    });
    expect(await count()).toBe(before + 1);
  });
});
