import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import {
  Args,
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
 * Adversary 79 (graphql): under Mercurius' `jit`, a document compiled before the library put
 * its wrapper on the schema's middleware fields runs the field middleware again on every
 * replay, on the replayed value, which holds no input (inputs are no longer stored): the
 * replay answers the field `null`, silently, where the first answer gave `["red","green"]`.
 *
 * The app (Mercurius on Fastify, `jit: 1`): `Order { id tags: [String!] }`, `tags` behind Nest's
 * field middleware `audit` (`const tags = await next(); audited.push(tags); return tags`, an
 * audit line per answer: Nest's own example of field middleware is a logger);
 * `createOrder(ref)` with `@Idempotent()` (key in the header, required, the default).
 * The client sends one document with variables, as clients do; its first call forgot the
 * header (`key_missing`), the second has it, the third is that call's retry.
 *
 * Why: `answerOutputsOf` (lib/graphql/middleware-outputs.ts) replaces each middleware field's
 * `fieldDef.resolve` with its wrapper, once per schema, from `fieldSteps`
 * (lib/graphql/intercept-field.ts) only after `readField` gave a key: the refused first call
 * (`reading.kind === 'refused'`) returns before it. Mercurius compiles a document at its
 * second execution (`jit: 1`, before it runs), and graphql-jit copies each field's `resolve`
 * when it compiles: the compiled document holds Nest's own middleware resolver, never the
 * wrapper. At the keyed call the wrapper never runs (`noteMiddlewarePath` not called: the
 * hook stores no output), and on the replay the compiled document runs the middleware on the
 * replayed value, whose `tags` was never stored (the output design stores no input): null. The same as round 51a's `resolveType()` (fixed there by wrapping before
 * any compile could copy it).
 *
 * Docs (docs/guides/graphql.md, "Field middleware: its output, as the first answer gave it"):
 * "a replay answers that output: the middleware never runs on a replay."
 *
 * Control (passes): the same sequence without `jit`: the middleware runs once, at the keyed
 * call, and the replay answers its output.
 *
 * Severity: high (a replay answers other data than the first answer, with no error: every
 * replay of every keyed mutation of a document compiled in that window, for the process's
 * life; the middleware runs again on replays too).
 *
 * Fails now (jit: 1): the replay answers `createOrder: { id, tags: null }` (expected the first
 * answer's `tags: ["red","green"]`), and the middleware ran on the replay.
 *
 * Suggested fix: put the wrapper on at start-up (the module's bootstrap, or the first
 * `preExecution`/`requestDidStart` hook that sees the schema), before any document can be
 * compiled, as round 51a did for `resolveType()`; or call `answerOutputsOf` first thing in
 * `fieldSteps`, before the keyless and refused returns (still too late for a document whose
 * first run had no `@Idempotent()` field ... so start-up is the route).
 *
 * Fixed: Mercurius' `preExecution` hook (lib/graphql/replay-marker.ts), which runs before `jit`
 * compiles a document, puts the middleware fields' wrappers on the schema it is given
 * (`answerOutputsOf`, once per schema), so no document is compiled before them.
 */
let pool: Pool;

/** The tags each middleware run saw. */
const audited: unknown[] = [];

/** Nest's field middleware: an audit line per answer. */
const audit: FieldMiddleware = async (_ctx, next) => {
  const tags: unknown = await next();
  audited.push(tags);
  return tags;
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { nullable: true, middleware: [audit] })
  tags?: string[];
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(@Args('ref') ref: string): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return { id: rows[0].id, tags: ['red', 'green'] };
  }
}

function ordersModule(jit: number | undefined) {
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
    providers: [OrdersResolver],
  })
  class OrdersModule {}
  return OrdersModule;
}

const document = 'mutation Create($ref: String!) { createOrder(ref: $ref) { id tags } }';

/** Starts the app with `jit` (or none); the fixture read once started. */
function started(jit: number | undefined): () => PoolApp {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp(`adv79_jit_mw_wrap_${jit ?? 'off'}`, {
      module: ordersModule(jit),
      max: 4,
      adapter: 'fastify',
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);
  afterAll(() => fixture?.close());
  return () => fixture;
}

/** The call without its key, the keyed call, its replay: the replay is the first answer. */
async function keyForgottenThenReplayed(fixture: PoolApp): Promise<void> {
  const send = (key: string | undefined, ref: string) => {
    const call = request(fixture.app.getHttpServer()).post('/graphql').timeout(10_000);
    if (key) call.set('Idempotency-Key', key);
    return call.send({ query: document, variables: { ref } });
  };
  audited.length = 0;
  const missing = await send(undefined, 'r1');
  expect(missing.body.errors?.[0]?.extensions?.code).toBe('key_missing');
  const first = await send('adv79-jit-mw', 'r1');
  expect(first.body.errors).toBeUndefined();
  expect(first.body.data.createOrder).toEqual({ id: expect.any(Number), tags: ['red', 'green'] });
  expect(audited).toHaveLength(1);
  const replay = await send('adv79-jit-mw', 'r1');
  // Fails under jit: tags null (the compiled document ran the middleware on the replay).
  expect(replay.body).toEqual({
    ...first.body,
    extensions: { idempotency: { replayed: ['createOrder'] } },
  });
  expect(audited).toHaveLength(1);
}

describe('adversary 79: a document compiled before the middleware wrapper, control: no jit', () => {
  const fixture = started(undefined);

  it('a call without its key first: the keyed call’s replay is its first answer', () =>
    keyForgottenThenReplayed(fixture()));
});

describe('adversary 79: a document compiled before the middleware wrapper, jit: 1', () => {
  const fixture = started(1);

  it('a call without its key first: the keyed call’s replay is its first answer', () =>
    keyForgottenThenReplayed(fixture()));
});
