import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import {
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
 * Fixed (session of 2026-12-06 fourth): a middleware field the answer holds as null with no error entry at or under its
 * path (Mercurius writes an `AggregateError` as its inner errors, with no path) is stored with
 * what its middleware threw, noted by the library's wrapper as its result (a rejected Promise,
 * or a synchronous throw), at its path (lib/graphql/unanswered-nulls.ts, `thrownUnanswered`
 * in lib/graphql/output-paths.ts): a replay answers that error again.
 *
 * Adversary 90 (graphql): on Mercurius (with or without `jit`), Nest field middleware that
 * throws an `AggregateError` (a check of several rules at once, each failure its own Error).
 * The first answer: the field null, and Mercurius' formatter writes one entry per inner error
 * (`{"message":"one"}`, `{"message":"two"}`, no path). Every replay: the field null and NO
 * error at all: a made-up null, the reason gone.
 *
 * User code:
 *   const rules: FieldMiddleware = async () => {
 *     throw new AggregateError([new Error('one'), new Error('two')], 'many');
 *   };
 *   @ObjectType() class Thing { @Field(() => Int) id;
 *     @Field({ nullable: true, middleware: [rules] }) grade?: string }
 *   @Mutation(() => Thing) @Idempotent() make() { INSERT ...; return { id, grade } }
 *   GraphQLModule.forRoot({ driver: MercuriusDriver, autoSchemaFile: true }) on Fastify
 *
 * Code path: lib/graphql/middleware-outputs.ts / stored-at-answer.ts: the outputs are stored
 * from the first answer as its `onResolution` hook sees it; the field's null there has no
 * error at its path (Mercurius' entries for the aggregate's inner errors carry none), so it is
 * stored as a plain null, which `outputValue` answers as `null` (`errorUnder` finds nothing).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a field the first answer gave as null
 * with its error answers that error again where it was ... the middleware's own (what it
 * threw, of its kind ...)"; "A retry that selects a field ... gets, for that field, an error,
 * never a made-up null"; for a resolver's `AggregateError` under Mercurius: "its replay as the
 * aggregate's one entry" (an entry still).
 *
 * Severity: medium (every replay says the field is null with no error; a client tells "no
 * value" from "failed" by the errors, and is told the first).
 *
 * Fails now (unskip the it.skip and run this file): the replay's body is
 * `{"data":{"make":{"id":2,"grade":null}},"extensions":{"idempotency":{"replayed":["make"]}}}`
 * (first answer: the same data with `errors: [{"message":"one"},{"message":"two"}]`).
 * Control (passes): the same middleware throwing one `Error`: replayed with its error.
 *
 * Suggested fix: record a middleware field's error where the library's wrapper catches it
 * (the thrown value, at the field's path), not only from the answer's entries by path; an
 * aggregate then replays at least as the aggregate's one entry (as for a resolver), or as its
 * inner errors, as Mercurius wrote them.
 */
let pool: Pool;

/** Checks several rules at once; each failure is its own Error. */
const rules: FieldMiddleware = async () => {
  throw new AggregateError([new Error('one'), new Error('two')], 'many');
};

/** The same check, failing with one Error. */
const rule: FieldMiddleware = async () => {
  throw new Error('one');
};

@ObjectType()
class Thing {
  @Field(() => Int)
  id!: number;

  @Field({ nullable: true, middleware: [rules] })
  grade?: string;

  @Field({ nullable: true, middleware: [rule] })
  score?: string;
}

@Resolver(() => Thing)
class ThingsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Thing)
  @Idempotent()
  async make(): Promise<Thing> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO things DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, grade: 'A', score: '10' };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<MercuriusDriverConfig>({
      driver: MercuriusDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [ThingsResolver],
})
class ThingsModule {}

describe('adversary 90: Mercurius, field middleware that throws an AggregateError', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv90_gql_mw_aggregate', {
      module: ThingsModule,
      max: 6,
      adapter: 'fastify',
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE things (id serial PRIMARY KEY)');
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

  const replayOf = async (key: string, field: 'grade' | 'score') => {
    const query = `mutation { make { id ${field} } }`;
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.data.make[field]).toBeNull();
    expect(firstAnswer.body.errors?.length).toBeGreaterThan(0);
    const again = await post(key, query);
    expect(again.body.data).toEqual(firstAnswer.body.data);
    expect(again.body.errors?.length).toBeGreaterThan(0);
    expect(again.body.errors?.map((error: { message: string }) => error.message)).toEqual(
      expect.arrayContaining([expect.stringMatching(/one|many/)]),
    );
  };

  it('control: middleware that throws one Error: the replay answers its error', async () => {
    await replayOf('adv90-mw-one-error', 'score');
  });

  it('middleware that throws an AggregateError: the replay answers an error', async () => {
    await replayOf('adv90-mw-aggregate', 'grade');
  });
});
