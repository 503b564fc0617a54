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
 * Fixed (session of 2026-12-06 fifth): lib/graphql/unanswered-nulls.ts `nullKeyOf` gives a
 * null at the mutation's own field the key `''` (and `unansweredNulls` takes any error under
 * the mutation's field as answering it); `thrownUnanswered` (output-paths.ts) uses it, so what
 * the middleware threw is stored at the field's path and a replay nulls `box` again.
 *
 * Adversary 96 (graphql): round 93's Mercurius case one level up. Nest field middleware on a
 * NON-NULL field throws an `AggregateError`, and the chain of non-null fields reaches the
 * mutation's own field (`Box.thing: Thing!`, the mutation `box` nullable): its null nulls
 * `box` itself. Mercurius writes the aggregate as its inner errors, with no path. Every replay
 * of the same operation answers `field_not_stored`: "The field Thing.level was not selected by
 * the first call with this idempotency key ... or use a new key for a new operation", though
 * the first call selected it. A client that does as told runs the mutation again under a new
 * key: its effect twice. The same chain with one `Error` (`rank`) replays right.
 *
 * User code:
 *   const rules: FieldMiddleware = async () => {
 *     throw new AggregateError([new Error('one'), new Error('two')], 'many');
 *   };
 *   @ObjectType() class Thing { @Field(() => Int) id;
 *     @Field({ middleware: [rules] }) level: string }        // non-null
 *   @ObjectType() class Box { @Field(() => Int) id; @Field(() => Thing) thing }  // non-null
 *   @Mutation(() => Box, { nullable: true }) @Idempotent() box() { INSERT ...; return {...} }
 *   GraphQLModule.forRoot({ driver: MercuriusDriver, autoSchemaFile: true }) on Fastify
 *   mutation { box { id thing { id level } } }
 *
 * Code path: lib/graphql/output-paths.ts `thrownUnanswered` (0e3f82e): a middleware field left
 * out under a null takes the null's key by `relativeKey(first.root, path.slice(0, end))`,
 * which is undefined where the null is the mutation's field itself (`end` = the root's length:
 * `relativeKey` is strict), so the field is skipped ("one above it is another story
 * (`remadeOutputs`)"), and what its middleware threw is never stored; the replay rebuilds
 * `box` from the stored value, reaches `thing.level`, finds no output nor error and refuses it
 * as unselected.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "where the answer does not say where it
 * was, as Mercurius writes an `AggregateError` as its inner errors with no path, what the
 * middleware threw, at the field), ... and one that nulled the field's parent (a middleware's
 * null on a non-null field nulls the same parent)"; `field_not_stored` is for "A retry that
 * selects a field the first call did not".
 *
 * Severity: high (the replay tells the client its operation differs and to use a new key: an
 * effect twice for a client that follows it).
 *
 * Fails now (unskip the it.skip): first `{"data":{"box":null},"errors":[{"message":"one"},
 * {"message":"two"}]}`; replay `{"data":{"box":null},"errors":[{"message":"The field
 * Thing.level was not selected by the first call with this idempotency key: ...",
 * "path":["box","thing","level"],"extensions":{"code":"field_not_stored"}}],...}`.
 * Control (passes): the same chain with middleware throwing one `Error` (`rank`): replayed
 * as first answered.
 *
 * Suggested fix: in `thrownUnanswered`, take a null at the mutation's own field too (the
 * null's key `''`, with `unansweredNulls` matching any error key under it), and store what the
 * middleware threw at the field's path, which nulls `box` again on a replay.
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

  @Field(() => Thing)
  thing!: Thing;
}

@Resolver(() => Thing)
class ThingsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Box, { nullable: true })
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

describe('adversary 96: Mercurius, an AggregateError on a non-null chain nulls the mutation', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv96_gql_mw_agg_root', {
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
    const again = await post(key, query);
    const third = await post(key, query);
    expect(firstAnswer.body.data).toEqual({ box: null });
    expect(again.body.data).toEqual(firstAnswer.body.data);
    const codes = (again.body.errors ?? []).map(
      (error: { extensions?: { code?: string } }) => error.extensions?.code,
    );
    expect(codes).not.toContain('field_not_stored');
    expect(third.text).toBe(again.text);
    expect(await count()).toBe(before + 1);
  };

  it('control: non-null chain to the mutation, middleware that throws one Error', async () => {
    await replayOf('adv96-mw-root-one', 'rank');
  });

  it('non-null chain to the mutation, middleware that throws an AggregateError: replayed, never field_not_stored', async () => {
    await replayOf('adv96-mw-root-aggregate', 'level');
  });
});
