import { jest } from '@jest/globals';
import { BadRequestException, Module } from '@nestjs/common';
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
 * Adversary, round 51a: round 50a's fix for Mercurius' `jit` wraps every abstract type's
 * `resolveType()` "from the first stored answer on" (`answerMembersOf`, called only from
 * `outputWire`, lib/graphql/wire-value.ts:211; lib/graphql/replayed-member.ts:45-56). graphql-jit
 * copies `type.resolveType` when it COMPILES an operation, and Mercurius compiles a document at
 * its second execution (`jit: 1`), whatever the keys. A client sends ONE document with
 * variables (as clients do); its first call with a key is refused by the resolver (a thrown
 * `BadRequestException`: the error is stored, no answer is walked, nothing is wrapped); the
 * second call, with another key, is the document's second execution: Mercurius compiles it
 * with the app's own `resolveType()`, and only then does the library store its first answer
 * and wrap the type, too late for the cached compiled document. Every replay of that key runs
 * the app's `resolveType()` on the replay's `{ id }` (the unselected `title` is not stored):
 * null, "Runtime Object type ... is not a possible type", `data: null`.
 *
 * The app (Mercurius on Fastify, the pool seam, `jit: 1`): round 44b's union (Nest's recipe:
 * `resolveType(value) { if (value.name) return Author; if (value.title) return Book; }`),
 * `publish(ref)` (`@Idempotent()`) refuses a ref starting with "bad" (BadRequestException),
 * else inserts a row and returns a `Book`. The client's document: `mutation Publish($ref:
 * String!) { publish(ref: $ref) { __typename ... on Book { id } ... on Author { id } } }`.
 *
 * What happens: key A (ref "bad") answers the 400 error (and replays it); key B (ref "ok")
 * answers `{ __typename: "Book", id }`; key B's replay: `data: null` with the error above.
 *
 * Expected: key B's replay is its first answer, plus the replay marker.
 *
 * Control: the same sequence without `jit`: passes.
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
    if (ref.startsWith('bad')) throw new BadRequestException('ref refused');
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

const document =
  'mutation Publish($ref: String!) { publish(ref: $ref) { __typename ... on Book { id } ... on Author { id } } }';

describe.each([
  ['control: no jit', undefined],
  ['jit: 1', 1],
] as const)(
  'adversary 51a: a document compiled by Mercurius before the first stored answer, %s',
  (_name, jit) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv51a_jit_before_store_${jit ?? 'off'}`, {
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

    const send = (key: string, ref: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .timeout(10_000)
        .send({ query: document, variables: { ref } });
    const effects = async (ref: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM effects WHERE ref = $1', [ref])).rows[0]
          .count,
      );
    const replayedAs = (first: { body: object }, field: string) => ({
      ...first.body,
      extensions: { idempotency: { replayed: [field] } },
    });

    it("a refused call first, then another key's answer: its replay is its first answer", async () => {
      const refused = await send('key-a', 'bad-1');
      expect(refused.body.errors?.[0]?.message).toBe('ref refused');
      const first = await send('key-b', 'ok');
      const replay = await send('key-b', 'ok');
      expect(first.body.errors).toBeUndefined();
      expect(first.body.data.publish).toEqual({ __typename: 'Book', id: expect.any(Number) });
      // Observed with jit: data null, "Runtime Object type ... is not a possible type ...".
      expect(replay.body.errors).toBeUndefined();
      expect(replay.body).toEqual(replayedAs(first, 'publish'));
      expect(await effects('ok')).toBe(1);
    });
  },
);
