import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ClassSerializerInterceptor, Module } from '@nestjs/common';
import { APP_INTERCEPTOR, Reflector } from '@nestjs/core';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { Exclude } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 52a: the parent's own data that a `@ResolveField()` of the same name reads
 * (lib/graphql/wire-value.ts:351, `kept[name] = own.value`; its data that is no field likewise, :305) is kept as typed JSON
 * (`keepData`, superjson; restored at :714), which gives an INSTANCE back as a plain object: the class
 * class-transformer applies to it (found by `value.constructor`) is lost on a replay, and with
 * it its `@Exclude()`. Round 51a named such instances again in a scalar's value (LEAF_CLASS)
 * and in a getter's (GOTTEN_CLASSES), not in `__kept`. Nothing is logged: `StaffEntity` has no
 * method or getter, so `keepData` counts the copy as faithful.
 *
 * The app (Apollo on Express, the pool seam, Nest's global `ClassSerializerInterceptor`; the
 * entity/model split): `class StaffEntity { name; @Exclude() email }`, `class TeamEntity { id;
 * lead: StaffEntity }` (a loaded relation). `@ObjectType('Staff') { name; email? }`,
 * `@ObjectType('Team') { id; lead: Staff }`, and the everyday relation resolver "use the loaded
 * relation, else load it": `@ResolveField(() => Staff) lead(@Parent() team) { return team.lead
 * ?? this.loadLead(team.id) }`. `createTeam(ref)` (`@Idempotent()`) inserts a row and returns the
 * entity. The client selects `{ id lead { name email } }`.
 *
 * At the first answer the serializer transforms the `TeamEntity` and its `StaffEntity` (by its
 * class): the field resolver gets `lead: { name: "Ann" }`, so `email: null`. The library keeps
 * the parent's `lead` as typed JSON (plain); on a replay the serializer finds no class for it
 * and copies `email`, which the field resolver hands to GraphQL.
 *
 * What happens: first answer `lead: { name: "Ann", email: null }`; every replay `lead: { name:
 * "Ann", email: "ann@example.com" }`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Controls: (1) without `@Idempotent()`, the email is masked; (2) the same entity under a type
 * without the `@ResolveField()` (`lead` stored as a field): the replay names `StaffEntity` and
 * masks it. Both pass.
 *
 * Severity: critical (masked data shown).
 */
let pool: Pool;

class StaffEntity {
  name!: string;

  @Exclude()
  email!: string;
}

class TeamEntity {
  id!: number;
  lead?: StaffEntity;
}

@ObjectType('Staff')
class StaffModel {
  @Field()
  name!: string;

  @Field(() => String, { nullable: true })
  email?: string;
}

@ObjectType('Team')
class TeamModel {
  @Field(() => Int)
  id!: number;

  @Field(() => StaffModel)
  lead!: StaffModel;
}

@ObjectType('PlainTeam')
class PlainTeamModel {
  @Field(() => Int)
  id!: number;

  @Field(() => StaffModel)
  lead!: StaffModel;
}

const ann = () => Object.assign(new StaffEntity(), { name: 'Ann', email: 'ann@example.com' });

@Resolver(() => TeamModel)
class TeamResolver {
  @ResolveField(() => StaffModel)
  lead(@Parent() team: TeamEntity): StaffEntity {
    // The loaded relation, else loaded (not reached here: it is always loaded).
    return team.lead ?? ann();
  }
}

@Resolver()
class TeamsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async insert(ref: string): Promise<number> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return rows[0].id;
  }

  @Mutation(() => TeamModel)
  @Idempotent()
  async createTeam(@Args('ref') ref: string): Promise<TeamEntity> {
    return Object.assign(new TeamEntity(), { id: await this.insert(ref), lead: ann() });
  }

  @Mutation(() => TeamModel)
  async createTeamPlain(@Args('ref') ref: string): Promise<TeamEntity> {
    return Object.assign(new TeamEntity(), { id: await this.insert(ref), lead: ann() });
  }

  @Mutation(() => PlainTeamModel)
  @Idempotent()
  async createPlainTeam(@Args('ref') ref: string): Promise<TeamEntity> {
    return Object.assign(new TeamEntity(), { id: await this.insert(ref), lead: ann() });
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      includeStacktraceInErrorResponses: false,
    }),
  ],
  providers: [
    TeamsResolver,
    TeamResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class TeamsModule {}

describe("adversary 52a: a @ResolveField() reading its parent's entity with @Exclude()", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv52a_resolve_field_parent_instance', {
      module: TeamsModule,
      max: 4,
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

  it('control: without @Idempotent(), the email is masked', async () => {
    const first = await send(
      'p',
      'mutation { createTeamPlain(ref: "p") { id lead { name email } } }',
    );
    expect(first.body.data.createTeamPlain.lead).toEqual({ name: 'Ann', email: null });
  });

  it('control: the lead stored as a field: the replay is the first answer', async () => {
    const query = 'mutation { createPlainTeam(ref: "own") { id lead { name email } } }';
    const first = await send('own', query);
    const replay = await send('own', query);
    expect(first.body.data.createPlainTeam.lead).toEqual({ name: 'Ann', email: null });
    expect(replay.body).toEqual(replayedAs(first, 'createPlainTeam'));
    expect(await effects('own')).toBe(1);
  });

  it('the lead through a @ResolveField() of its parent: the replay masks the email', async () => {
    const query = 'mutation { createTeam(ref: "rf") { id lead { name email } } }';
    const first = await send('rf', query);
    const replay = await send('rf', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createTeam.lead).toEqual({ name: 'Ann', email: null });
    // Observed: lead { name: "Ann", email: "ann@example.com" }.
    expect(replay.body.data?.createTeam?.lead).toEqual({ name: 'Ann', email: null });
    expect(replay.body).toEqual(replayedAs(first, 'createTeam'));
    expect(await effects('rf')).toBe(1);
  });
});
