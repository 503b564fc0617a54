import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import {
  Args,
  createUnionType,
  Field,
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
 * Adversary, round 50a: round 44b's union (Nest's recipe: `resolveType(value) { if (value.name)
 * return Author; if (value.title) return Book; }`), the client selecting `{ __typename ... on
 * Book { id } }`, on Mercurius with its JIT on (`jit: 1`, Mercurius' documented option: a query
 * seen once is compiled by graphql-jit at its second execution). Every replay fails.
 *
 * Round 44b's fix makes the union answer a replay's object as the member it was stored as by
 * REPLACING the union type's `resolveType` with a wrapper, lazily, the first time `fromWire`
 * builds a replay's member (`answerAsMember`, lib/graphql/replayed-member.ts:16-26, called from
 * lib/graphql/wire-value.ts:541, while the mutation resolves). graphql-jit reads
 * `type.resolveType` ONCE, when it compiles the query (graphql-jit dist/execution.js:643-650,
 * `context.typeResolvers[...] = type.resolveType`), and Mercurius compiles before it executes
 * (mercurius index.js:598 and :631-635). The retry is the query's second execution: compiled with
 * the app's own `resolveType()`, before the library wrapped it. The app's function runs on the
 * replay's `{ id }` (the unselected `title` is not stored), returns null, and the answer is
 * `data: null` ("Runtime Object type is not a possible type for \"ResultUnion\"") on this and
 * every later retry (the compiled query is cached).
 *
 * The app (Mercurius on Fastify, the pool seam): `@ObjectType() Author { id; name }`,
 * `@ObjectType() Book { id; title }`, `ResultUnion` as above; `GraphQLModule.forRoot({ driver:
 * MercuriusDriver, autoSchemaFile: true, jit: 1 })`. `publish(ref)` (`@Idempotent()`) inserts a
 * row and returns a `Book`.
 *
 * What happens: first answer `{ __typename: "Book", id }`; both replays `data: null` with the
 * error above.
 *
 * Expected: each replay is the first answer, plus the replay marker.
 *
 * Control: the same app without `jit`: the replays are the first answer. Passes.
 *
 * Severity: critical (a committed mutation's answer lost on every replay: data at first, an
 * error after).
 */
let pool: Pool;

@ObjectType()
class Author {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;
}

@ObjectType()
class Book {
  @Field(() => Int)
  id!: number;

  @Field()
  title!: string;
}

const ResultUnion = createUnionType({
  name: 'ResultUnion',
  types: () => [Author, Book] as const,
  resolveType(value: { name?: string; title?: string }) {
    if (value.name) return Author;
    if (value.title) return Book;
    return null;
  },
});

@Resolver()
class PublishResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => ResultUnion)
  @Idempotent()
  async publish(@Args('ref') ref: string): Promise<typeof ResultUnion> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return Object.assign(new Book(), { id: rows[0].id, title: `Book ${ref}` });
  }
}

function publishModule(jit: number | undefined) {
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
      GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
        ...(jit === undefined ? {} : { jit }),
      }),
    ],
    providers: [PublishResolver],
  })
  class PublishModule {}
  return PublishModule;
}

describe.each([
  ['control: no jit', undefined],
  ['jit: 1', 1],
] as const)('adversary 50a: a union member replayed on Mercurius, %s', (_name, jit) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp(`adv50a_mercurius_jit_${jit ?? 'off'}`, {
      module: publishModule(jit),
      max: 4,
      adapter: 'fastify',
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE effects (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ query });
  const effects = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM effects WHERE ref = $1', [ref])).rows[0]
        .count,
    );
  const replayedAs = (first: { body: object }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  it('only the id selected: each replay is the first answer', async () => {
    const query =
      'mutation { publish(ref: "ids") { __typename ... on Book { id } ... on Author { id } } }';
    const first = await send('ids', query);
    const replay = await send('ids', query);
    const again = await send('ids', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.publish).toEqual({ __typename: 'Book', id: expect.any(Number) });
    // Observed with jit: data null, "Runtime Object type is not a possible type for ...".
    expect(replay.body.errors).toBeUndefined();
    expect(replay.body).toEqual(replayedAs(first, 'publish'));
    expect(again.body).toEqual(replayedAs(first, 'publish'));
    expect(await effects('ids')).toBe(1);
  });
});
