import { jest } from '@jest/globals';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ClassSerializerInterceptor, Module } from '@nestjs/common';
import { APP_INTERCEPTOR, Reflector } from '@nestjs/core';
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
 * Book { id } }`, in an app with Nest's global `ClassSerializerInterceptor` (the recipe the
 * guide says replays are made for). Every replay fails where the first call answered.
 *
 * Round 44b's fix marks the replay's object with the member it was stored as, under a Symbol
 * defined not enumerable (`answerAsMember`, lib/graphql/replayed-member.ts:16-26, called from
 * `fromWire`, lib/graphql/wire-value.ts:541), and wraps the union's `resolveType()` to answer
 * that mark first. But the serializer outside `@Idempotent()` hands GraphQL a COPY
 * (`instanceToPlain`: a new `{}` of the own enumerable keys), which has no mark: the app's own
 * `resolveType()` runs on `{ id }` (the unselected `title` is not stored), returns null, and
 * GraphQL answers "Abstract type \"ResultUnion\" must resolve to an Object type at runtime":
 * `data: null`, on every retry of a mutation that committed. At the first call the copy is of
 * the resolver's whole `Book`, `title` included, and resolves.
 *
 * The app (both drivers: Apollo on Express, Mercurius on Fastify; the pool seam;
 * `ClassSerializerInterceptor` global): `@ObjectType() Author { id; name }`, `@ObjectType() Book
 * { id; title }`, `ResultUnion` as above. `publish(ref)` (`@Idempotent()`) inserts a row and
 * returns a `Book`.
 *
 * What happens: first answer `{ __typename: "Book", id }`; replay `data: null` with the error
 * above.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same with `title` selected (what `resolveType()` reads is stored): the replay is
 * the first answer. Passes. (Without the serializer, round 44b's test, it passes too.)
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

function publishModule(driver: 'apollo' | 'mercurius') {
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
      driver === 'apollo'
        ? GraphQLModule.forRoot<ApolloDriverConfig>({
            driver: ApolloDriver,
            autoSchemaFile: true,
            graphiql: false,
            includeStacktraceInErrorResponses: false,
          })
        : GraphQLModule.forRoot<MercuriusDriverConfig>({
            driver: MercuriusDriver,
            autoSchemaFile: true,
            graphiql: false,
          }),
    ],
    providers: [
      PublishResolver,
      {
        provide: APP_INTERCEPTOR,
        inject: [Reflector],
        useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
      },
    ],
  })
  class PublishModule {}
  return PublishModule;
}

describe.each(['apollo', 'mercurius'] as const)(
  'adversary 50a: a union member replayed through the class serializer (%s)',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv50a_union_serializer_${driver}`, {
        module: publishModule(driver),
        max: 4,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
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

    it('control: the field resolveType() reads is selected: the replay is the first answer', async () => {
      const query =
        'mutation { publish(ref: "ctl") { __typename ... on Book { id title } ... on Author { id } } }';
      const first = await send('ctl', query);
      const replay = await send('ctl', query);
      expect(first.body.data.publish).toEqual({
        __typename: 'Book',
        id: expect.any(Number),
        title: 'Book ctl',
      });
      expect(replay.body).toEqual(replayedAs(first, 'publish'));
      expect(await effects('ctl')).toBe(1);
    });

    it('only the id selected: the replay is the first answer', async () => {
      const query =
        'mutation { publish(ref: "ids") { __typename ... on Book { id } ... on Author { id } } }';
      const first = await send('ids', query);
      const replay = await send('ids', query);
      expect(first.body.errors).toBeUndefined();
      expect(first.body.data.publish).toEqual({ __typename: 'Book', id: expect.any(Number) });
      // Observed: data null, "Abstract type \"ResultUnion\" must resolve to an Object type ...".
      expect(replay.body.errors).toBeUndefined();
      expect(replay.body).toEqual(replayedAs(first, 'publish'));
      expect(await effects('ids')).toBe(1);
    });
  },
);
