import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
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
import { Transform } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 76: under Nest's global `ClassSerializerInterceptor`, a private member's email
 * masked by a `@Transform()` is masked at the first answer and shown on every replay when the
 * members reach the list as a `Set` behind field middleware (a sort): the Set is kept as typed
 * JSON, its members plain objects that name no class, so the serializer outside
 * `@Idempotent()` finds no transform to apply to the replay.
 *
 * The user code (Apollo on Express):
 *
 *   @ObjectType() class Member {
 *     @Field() name!: string;
 *     @Field({ nullable: true })
 *     @Transform(({ value, obj }) => (obj.private ? null : value))
 *     email!: string;
 *     private!: boolean; // a column, no field
 *   }
 *   const byName: FieldMiddleware = async (_ctx, next) =>
 *     [...((await next()) as Iterable<Member>)].sort((a, b) => a.name.localeCompare(b.name));
 *   @ObjectType() class Team { @Field(() => Int) id; @Field(() => [Member], { middleware: [byName] }) members; }
 *   @Mutation(() => Team) @Idempotent() joinTeam() { insert; return { id, members: new Set(rows.map(toMember)) }; }
 *   providers: [{ provide: APP_INTERCEPTOR, useFactory: (r) => new ClassSerializerInterceptor(r), inject: [Reflector] }]
 *
 * Why: `fitsListType` (lib/graphql/middleware-input.ts) is false for a Set, so `walkValue`
 * (lib/graphql/wire-value.ts) keeps it with `keepInput` in `kept` (typed JSON, each member its
 * own data); the members are never walked, so none gets the class mark (`INSTANCE`,
 * `plainOfNestType`) that names `Member` as its `constructor` on a replay, which is where
 * class-transformer looks its transforms up. The first answer's serializer saw `Member`
 * instances in the Set (class-transformer writes a Set as an array of its transformed items)
 * and masked the email; the replay's sees plain objects and copies the email.
 *
 * What the docs promise (docs/guides/graphql.md): "a value of `@ObjectType() class Card` that
 * is a `Card` ... comes back on a replay as a plain object that names `Card` as its
 * `constructor` ...: Nest's `ClassSerializerInterceptor` outside `@Idempotent()` applies its
 * `@Expose()`, `@Exclude()`, `@Transform()` and `@Type()` to a replay as to the first answer ...
 * so the serializer masks a replay as it masked the first answer"; behind middleware "a `Map`,
 * a `Set` or a record ... is kept as it is"; "A list GraphQL takes as any iterable".
 *
 * Control: the same members as an array behind the same middleware (walked, each named
 * `Member` again): masked at first and on the replay; the membership committed once.
 *
 * Severity: high (data the app masks, a private member's email, shown to every retry).
 *
 * Fails now: the replay answers `email: "bo@example.com"` for the private member, whose first
 * answer was `email: null`.
 *
 * Suggested fix: walk a kept container's items with the list's item type (their class marks,
 * members and selected scalars written as for an array's items), keeping the container's shape
 * around them; at the least name the class of each object in a kept input (`classTree`, as for
 * a scalar's value).
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

/** Nest's field middleware: the team's members by name. */
const byName: FieldMiddleware = async (_ctx, next) =>
  [...((await next()) as Iterable<Member>)].sort((a, b) => a.name.localeCompare(b.name));

@ObjectType()
class Team {
  @Field(() => Int)
  id!: number;

  @Field(() => [Member], { middleware: [byName] })
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
    return {
      id: rows[0].id,
      members: asArray ? members : new Set(members),
    };
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

describe('adversary 76: a serializer mask on members in a Set behind list middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_set_serializer', {
      module: TeamsModule,
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
    const first = await post('adv76-mw-set-serializer-c', query);
    expect(first.body).toEqual({ data: { joinTeam: { id: expect.any(Number), members } } });
    const again = await post('adv76-mw-set-serializer-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('the members as a Set: masked at first and on the replay', async () => {
    const query = 'mutation { joinTeam { id members { name email } } }';
    const before = await count();
    const first = await post('adv76-mw-set-serializer-a', query);
    expect(first.body).toEqual({ data: { joinTeam: { id: expect.any(Number), members } } });
    const again = await post('adv76-mw-set-serializer-a', query);
    expect(await count()).toBe(before + 1);
    // Fails: Bo's email shown on the replay.
    expect(again.body).toEqual(replayOf(first));
  });
});
