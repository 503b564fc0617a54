import { jest } from '@jest/globals';
import { ClassSerializerInterceptor, Module } from '@nestjs/common';
import { APP_INTERCEPTOR, Reflector } from '@nestjs/core';
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
import { Transform } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 76: on Mercurius, with Nest's documented global logger middleware
 * (`buildSchemaOptions: { fieldMiddleware: [loggerMiddleware] }`, a pass-through) and Nest's
 * `ClassSerializerInterceptor`, a list field whose value is a `Set` of entities (GraphQL takes
 * any iterable) is masked at the first answer and shown on every replay: behind middleware a
 * Set is kept as it is, its members plain objects that name no class, so the serializer finds
 * no `@Transform()` to apply.
 *
 * The user code (Fastify, Mercurius):
 *
 *   const loggerMiddleware: FieldMiddleware = async (ctx, next) => {
 *     const value = await next();
 *     seen.push(ctx.info?.fieldName ?? '');
 *     return value;
 *   };
 *   GraphQLModule.forRoot<MercuriusDriverConfig>({ driver: MercuriusDriver, autoSchemaFile: true,
 *     buildSchemaOptions: { fieldMiddleware: [loggerMiddleware] } }),
 *   { provide: APP_INTERCEPTOR, useFactory: (r) => new ClassSerializerInterceptor(r), inject: [Reflector] }
 *   @ObjectType() class Member {
 *     @Field() name!: string;
 *     @Field(() => String, { nullable: true }) @Transform(({ value, obj }) => (obj.private ? null : value)) email!: string;
 *     private!: boolean;
 *   }
 *   @ObjectType() class Team { @Field(() => Int) id; @Field(() => [Member]) members!: Set<Member>; }
 *   @Mutation(() => Team) @Idempotent() joinTeam() { insert; return { id, members: new Set(members) }; }
 *
 * Why: under a global field middleware every field's resolver is Nest's middleware wrapper
 * (`resolverKind` 'middleware', lib/graphql/resolver-kind.ts), so `walkValue`
 * (lib/graphql/wire-value.ts) takes `members` as a middleware's input; `fitsListType`
 * (lib/graphql/middleware-input.ts) is false for a Set, so it is kept with `keepInput` as
 * typed JSON, never walked with `Member`: no member gets the class mark that names `Member` as
 * its `constructor` on a replay.
 *
 * What the docs promise (docs/guides/graphql.md): "a value of `@ObjectType() class Card` that
 * is a `Card` ... comes back on a replay as a plain object that names `Card` as its
 * `constructor` ...: Nest's `ClassSerializerInterceptor` outside `@Idempotent()` applies its
 * ... `@Transform()` ... to a replay as to the first answer"; "A list GraphQL takes as any
 * iterable"; a pass-through logger changes nothing of the answer.
 *
 * Control: the same app with the members as an array: masked at first and on the replay;
 * the membership committed once.
 *
 * Severity: high (a masked email shown to every retry, by adding Nest's own logger example).
 *
 * Fails now: the replay answers Bo's `email: "bo@example.com"`, the first answer `null`.
 *
 * Suggested fix: walk a kept container's items with the list's item type (class marks,
 * members), keeping its shape; and treat a pass-through middleware's iterable as the list
 * GraphQL reads.
 *
 * Fixed (round 78): the library no longer reads nor stores a field middleware's input, and
 * never runs the middleware on a replay. The answer commits with the resolver's effects as
 * before (lib/graphql/run-field.ts `settle`), its middleware outputs pending; the operation's
 * answer hook (lib/graphql/replay-marker.ts: Apollo `willSendResponse`, Mercurius
 * `onResolution`) takes each middleware field's output from the answer's data, as the client
 * got it (masked by an outer serializer), and completes the stored answer with one fenced
 * UPDATE (`ClaimStore.completeAnswer`, lib/graphql/output-paths.ts `storeOutputsOf`). On a
 * replay a wrapper on each middleware field of the schema (lib/graphql/middleware-outputs.ts
 * `answerOutputsOf`) answers the stored output for its path, its scalars through
 * `parseValue()`; a replay meeting the outputs pending waits for them, bounded, then answers
 * `field_output_pending`. middleware-input.ts and middleware-extras.ts are gone.
 */
let pool: Pool;
const seen: string[] = [];

/** Nest's docs' logger middleware, global: a pass-through. */
const loggerMiddleware: FieldMiddleware = async (ctx, next) => {
  const value: unknown = await next();
  seen.push(ctx.info?.fieldName ?? '');
  return value;
};

@ObjectType()
class Member {
  constructor(name: string, email: string, hidden: boolean) {
    this.name = name;
    this.email = email;
    this.private = hidden;
  }

  @Field()
  name: string;

  @Field(() => String, { nullable: true })
  @Transform(({ value, obj }: { value: string; obj: Member }) => (obj.private ? null : value))
  email: string;

  /** A column of the member's, no field: whether the email is shown. */
  private: boolean;
}

@ObjectType()
class Team {
  @Field(() => Int)
  id!: number;

  @Field(() => [Member])
  members!: Set<Member> | Member[];
}

@Resolver(() => Team)
class TeamsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Team, { nullable: true })
  @Idempotent()
  async joinTeam(
    @Args('asArray', { type: () => Boolean, defaultValue: false }) asArray: boolean,
  ): Promise<Team> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO memberships DEFAULT VALUES RETURNING id',
    );
    const members = [
      new Member('Ada', 'ada@example.com', false),
      new Member('Bo', 'bo@example.com', true),
    ];
    return { id: rows[0].id, members: asArray ? members : new Set(members) };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<MercuriusDriverConfig>({
      driver: MercuriusDriver,
      autoSchemaFile: true,
      graphiql: false,
      buildSchemaOptions: { fieldMiddleware: [loggerMiddleware] },
    }),
  ],
  providers: [
    TeamsResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class TeamsModule {}

describe('adversary 76: Mercurius, a global logger middleware, a Set of masked members', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_merc_global_set', {
      module: TeamsModule,
      adapter: 'fastify',
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE memberships (id serial PRIMARY KEY)');
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

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['joinTeam'] } },
  });

  const count = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM memberships')).rows[0].n,
    );

  const members = [
    { name: 'Ada', email: 'ada@example.com' },
    { name: 'Bo', email: null },
  ];

  it('control: the members as an array, masked at first and on the replay', async () => {
    const query = 'mutation { joinTeam(asArray: true) { id members { name email } } }';
    const before = await count();
    const first = await post('adv76-merc-global-set-c', query);
    expect(first.body).toEqual({ data: { joinTeam: { id: expect.any(Number), members } } });
    const again = await post('adv76-merc-global-set-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
    expect(seen).toContain('members');
  });

  it('the members as a Set: masked at first and on the replay', async () => {
    const query = 'mutation { joinTeam { id members { name email } } }';
    const before = await count();
    const first = await post('adv76-merc-global-set-a', query);
    expect(first.body).toEqual({ data: { joinTeam: { id: expect.any(Number), members } } });
    const again = await post('adv76-merc-global-set-a', query);
    expect(await count()).toBe(before + 1);
    // Fails: Bo's email shown on the replay.
    expect(again.body).toEqual(replayOf(first));
  });
});
