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
 * Fixed (session of 2026-12-06 fifth): lib/graphql/output-paths.ts `thrownUnanswered`
 * also takes a middleware field left out under a null parent (under the mutation's field),
 * and lib/graphql/unanswered-nulls.ts takes it where no answered error is at or under that
 * null: what its middleware threw is stored at its path, and nulls the same parent on a replay.
 *
 * Adversary 93 (graphql): on Mercurius, Nest field middleware on a NON-NULL field that throws
 * an `AggregateError` nulls the field's parent; Mercurius writes the aggregate as its inner
 * errors with no path. Every replay of the same operation answers that field
 * `field_not_stored`: "The field Thing.level was not selected by the first call with this
 * idempotency key ... use a new key for a new operation", though the first call selected it.
 * A client that does as told runs the mutation again under a new key: its effect twice.
 *
 * User code:
 *   const rules: FieldMiddleware = async () => {
 *     throw new AggregateError([new Error('one'), new Error('two')], 'many');
 *   };
 *   @ObjectType() class Thing { @Field(() => Int) id;
 *     @Field({ middleware: [rules] }) level: string }        // non-null
 *   @ObjectType() class Box { @Field(() => Int) id;
 *     @Field(() => Thing, { nullable: true }) thing }
 *   @Mutation(() => Box) @Idempotent() box() { INSERT ...; return { id, thing } }
 *   GraphQLModule.forRoot({ driver: MercuriusDriver, autoSchemaFile: true }) on Fastify
 *   mutation { box { id thing { id level } } }
 *
 * Code path: lib/graphql/output-paths.ts `thrownUnanswered` (round 90) takes only the
 * middleware fields whose place in the data is null (`dataAt(data, path) === null`): under a
 * null `thing`, `thing.level` has no place (undefined), so what its middleware threw is never
 * stored (lib/graphql/unanswered-nulls.ts is never asked about it); the replay finds no output
 * nor error for `thing.level` and refuses it as an unselected field (`field_not_stored`),
 * instead of answering its error and nulling `thing` again.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a field the first answer gave as null
 * with its error answers that error again where it was, ...: the middleware's own (what it
 * threw, of its kind ...; where the answer does not say where it was, as Mercurius writes an
 * `AggregateError` as its inner errors with no path, what the middleware threw, at the field),
 * ... and one that nulled the field's parent (a middleware's null on a non-null field nulls
 * the same parent)"; "A retry that selects a field the first call did not gets ...
 * `field_not_stored`" (this one did select it).
 *
 * Severity: high (the replay tells the client its operation differs and to use a new key: an
 * effect twice for a client that follows it; the reason, the middleware's error, lost).
 *
 * Fails now (unskip the it.skip): first answer `{"data":{"box":{"id":1,"thing":null}},
 * "errors":[{"message":"one"},{"message":"two"}]}`; replay `{"data":{"box":{"id":1,
 * "thing":null}},"errors":[{"message":"The field Thing.level was not selected by the first
 * call ...","path":["box","thing","level"],"extensions":{"code":"field_not_stored"}}]}`.
 * Control (passes): the same non-null field with middleware that throws one `Error` (`rank`):
 * the replay answers `one` again, no refusal.
 *
 * Suggested fix: in the answer hook, a middleware field whose wrapper noted a rejection and
 * that has no place in the answer (an ancestor null with no error entry at or under it) is
 * stored with what it threw at its path, as `unansweredNulls` does for a null the answer holds.
 */ let pool: Pool;

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

  @Field({ middleware: [rules] })
  level!: string;

  // The same check, failing with one Error.
  @Field({ middleware: [rule] })
  rank!: string;
}

@ObjectType()
class Box {
  @Field(() => Int)
  id!: number;

  @Field(() => Thing, { nullable: true })
  thing?: Thing;
}

@Resolver(() => Thing)
class ThingsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Box)
  @Idempotent()
  async box(): Promise<Box> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO things DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, thing: { id: rows[0].id, level: 'x', rank: 'y' } };
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

describe('adversary 93: Mercurius, middleware on a non-null field throws an AggregateError', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv93_gql_mw_agg_nonnull', {
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

  const count = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM things')).rows[0].n;

  const replayOf = async (key: string, field: 'level' | 'rank') => {
    const before = await count();
    const query = `mutation { box { id thing { id ${field} } } }`;
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.data.box.thing).toBeNull();
    expect(firstAnswer.body.errors?.length).toBeGreaterThan(0);
    const again = await post(key, query);
    expect(again.body.data).toEqual(firstAnswer.body.data);
    const codes = (again.body.errors ?? []).map(
      (error: { extensions?: { code?: string } }) => error.extensions?.code,
    );
    expect(codes).not.toContain('field_not_stored');
    expect(again.body.errors?.map((error: { message: string }) => error.message)).toEqual(
      expect.arrayContaining([expect.stringMatching(/^(one|many)$/)]),
    );
    expect(await count()).toBe(before + 1);
  };

  it('control: non-null field, middleware that throws one Error: the replay answers its error', async () => {
    await replayOf('adv93-mw-nonnull-one', 'rank');
  });

  it('non-null field, middleware that throws an AggregateError: the replay answers an error of it', async () => {
    await replayOf('adv93-mw-nonnull-aggregate', 'level');
  });
});
