import { jest } from '@jest/globals';
import { ClassSerializerInterceptor, Module } from '@nestjs/common';
import { APP_INTERCEPTOR, Reflector } from '@nestjs/core';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { Exclude } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 58: a mutation's value with a list field that is not an array (a `Set`, as
 * domain classes hold their members) is given to its FIRST answer as a bare shell whose own
 * data is that list alone; Nest's `ClassSerializerInterceptor` outside `@Idempotent()` copies
 * only own data, and the first answer loses every other field (`data: null`, "Cannot return
 * null for non-nullable field Team.id") for a mutation that committed. Its replay answers.
 *
 * The app (Apollo on Express, Mercurius on Fastify; the pool seam): Nest's serialization
 * recipe, a global `ClassSerializerInterceptor` (default strategy, the one the docs name), and
 * a code-first model whose members are a `Set` (GraphQL takes any iterable for a list, and so
 * does class-transformer, which writes a Set as an array):
 *
 *   @ObjectType() class Team {
 *     @Field(() => Int) id; @Field() name;
 *     @Field(() => [String]) members: Set<string>;
 *     @Exclude() inviteSecret: string;
 *   }
 *
 * What happens: `outputWire` reads the list once (`materialized`, lib/graphql/wire-value.ts:
 * 937-942: `Array.from(set)`), and since that array is not the resolver's value the field is
 * "replaced" (wire-value.ts:376), so what the first answer is given is `over(source,
 * replaced)` (wire-value.ts:455, 528-540): `Object.create(team)` with ONE own property,
 * `members`; `id` and `name` are only on its prototype. `runField` returns it as the first
 * answer (`first = walked.value`, lib/graphql/run-field.ts:115). The serializer outside
 * (`classToPlain`, exposeAll: `Object.keys(value)`) copies `{ members }`, and GraphQL reads
 * `id` from that: null for an `Int!`, and the whole mutation answers `data: null` with an
 * INTERNAL_SERVER_ERROR-like error, though its row committed and its answer is stored. A
 * retry replays the stored form (a plain object with all its fields own), which the
 * serializer copies whole: the replay answers the team, different from the first answer.
 * Without `@Idempotent()` the serializer copies the instance's own `id`, `name` and the Set (as
 * an array): the app answers the team.
 *
 * Expected: "Nest's `ClassSerializerInterceptor` outside `@Idempotent()` applies its
 * `@Expose()`, `@Exclude()`, `@Transform()` and `@Type()` to a replay as to the first answer"
 * and "The first call gets the resolver's own value (its `Date`s, its class instances)"
 * (docs/guides/graphql.md, "What is stored, and replayed"); "the first answer is given the
 * list that was read and stored (the resolver's value itself is not changed)": the first
 * answer `{ id, name, members }`, the replay the same with the replay marker.
 *
 * Controls: the same model with its members as an array (nothing is replaced, the first answer
 * is the instance): first answer and replay are the team; the Set model without `@Idempotent()`:
 * the serializer answers the team. Both pass on both drivers; so does the Set's replay.
 *
 * Severity: high (a committed mutation's first answer is an error the client cannot tell
 * from a failure; the replay then answers what the first did not).
 *
 * Fixed: the first answer laid over a read field is a copy of the resolver's value, of its
 * class, with all its own data (`over`), so a serializer copying own keys sees them all.
 */
let pool: Pool;

@ObjectType()
class Team {
  @Field(() => Int)
  id: number;

  @Field()
  name: string;

  @Field(() => [String])
  members: Set<string>;

  @Exclude()
  inviteSecret = 'not-for-clients';

  constructor(id: number, name: string, members: string[]) {
    this.id = id;
    this.name = name;
    this.members = new Set(members);
  }
}

@ObjectType()
class Squad {
  @Field(() => Int)
  id: number;

  @Field()
  name: string;

  @Field(() => [String])
  members: string[];

  @Exclude()
  inviteSecret = 'not-for-clients';

  constructor(id: number, name: string, members: string[]) {
    this.id = id;
    this.name = name;
    this.members = members;
  }
}

@Resolver()
class TeamsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Team)
  @Idempotent()
  async createTeam(@Args('name') name: string): Promise<Team> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO teams (name) VALUES ($1) RETURNING id',
      [name],
    );
    return new Team(rows[0].id, name, ['ada', 'grace']);
  }

  /** The same, without @Idempotent(): what the app answers without the library. */
  @Mutation(() => Team)
  async createTeamUnkeyed(@Args('name') name: string): Promise<Team> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO teams (name) VALUES ($1) RETURNING id',
      [name],
    );
    return new Team(rows[0].id, name, ['ada', 'grace']);
  }

  @Mutation(() => Squad)
  @Idempotent()
  async createSquad(@Args('name') name: string): Promise<Squad> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO teams (name) VALUES ($1) RETURNING id',
      [name],
    );
    return new Squad(rows[0].id, name, ['ada', 'grace']);
  }
}

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
      });
}

describe.each(GRAPHQL_DRIVERS)(
  'adversary 58: a Set list field under a ClassSerializerInterceptor, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
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
      fixture = await startPoolApp(`adv58_set_serializer_${driver}`, {
        module: TeamsModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE teams (id serial PRIMARY KEY, name text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    const send = (key: string, query: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .timeout(5_000)
        .send({ query });
    const rows = async (name: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM teams WHERE name = $1', [name])).rows[0]
          .count,
      );

    async function firstAndReplay(field: 'createTeam' | 'createSquad', name: string) {
      const query = `mutation { ${field}(name: "${name}") { id name members } }`;
      const first = await send(name, query);
      const replay = await send(name, query);
      return { first: first.body as object, replay: replay.body as object, rows: await rows(name) };
    }

    const team = (field: string, name: string) => ({
      data: { [field]: { id: expect.any(Number), name, members: ['ada', 'grace'] } },
    });

    it('control: members as an array: the first answer and its replay are the team', async () => {
      const name = `${driver}-squad`;
      const { first, replay, rows } = await firstAndReplay('createSquad', name);
      expect(first).toEqual(team('createSquad', name));
      expect(replay).toEqual({
        ...first,
        extensions: { idempotency: { replayed: ['createSquad'] } },
      });
      expect(rows).toBe(1);
    });

    it('control: the Set without @Idempotent(): the serializer answers the team', async () => {
      const name = `${driver}-unkeyed`;
      const answer = await send(
        name,
        `mutation { createTeamUnkeyed(name: "${name}") { id name members } }`,
      );
      expect(answer.body).toEqual(team('createTeamUnkeyed', name));
    });

    it('members as a Set: the first answer is the team, as its replay is', async () => {
      const name = `${driver}-team`;
      const { first, replay, rows } = await firstAndReplay('createTeam', name);
      // The replay (a plain object, every field its own) is the team.
      expect(replay).toEqual({
        ...team('createTeam', name),
        extensions: { idempotency: { replayed: ['createTeam'] } },
      });
      expect(first).toEqual(team('createTeam', name));
      expect(replay).toEqual({
        ...first,
        extensions: { idempotency: { replayed: ['createTeam'] } },
      });
      expect(rows).toBe(1);
    });
  },
);
