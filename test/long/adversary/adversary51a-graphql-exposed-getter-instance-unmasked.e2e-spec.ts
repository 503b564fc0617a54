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
  Query,
  Resolver,
} from '@nestjs/graphql';
import { Exclude, Expose } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 51a: round 50a's GOTTEN (what a serialized class's getters that are no field
 * give, read at the first answer and replayed as non-enumerable data) keeps a getter's value as
 * typed JSON (`keepData`, superjson), which gives an INSTANCE back as a plain object: the class
 * class-transformer would apply to it is lost, and with it its `@Exclude()`. Nothing is even
 * logged: `StaffEntity` has no method or getter, so `keepData` counts the copy as faithful.
 *
 * The app (Apollo on Express, the pool seam, Nest's global `ClassSerializerInterceptor`; the
 * entity/model split): `class StaffEntity { name; @Exclude() email; isLead }`, `class
 * TeamEntity { id; members: StaffEntity[]; @Expose({ name: 'lead' }) get leader() { return
 * this.members.find((m) => m.isLead) } }` (class-transformer's documented way to put a getter
 * in the output under another name); `@ObjectType('Staff') { name; @Field({ nullable: true })
 * email }`, `@ObjectType('Team') { id; lead: Staff }`. `createTeam(ref)` (`@Idempotent()`)
 * inserts a row and returns the entity. The client selects `{ id lead { name email } }`.
 *
 * At the first answer the serializer calls the getter and transforms the `StaffEntity` by its
 * class (`value.constructor`): `lead: { name: "Ann", email: null }`. The library stores the
 * selected field `lead` as null (the entity has no `lead`: lib/graphql/wire-value.ts:330-334),
 * and the getter `leader` under GOTTEN (wire-value.ts:412-424, `classGetters` :130-155) as a
 * plain copy. On a replay the serializer exposes `leader` (a non-enumerable plain object,
 * wire-value.ts:687-697) as `lead`, finds no class for it, and copies `email`.
 *
 * What happens: first answer `lead: { name: "Ann", email: null }`; every replay `lead: { name:
 * "Ann", email: "ann@example.com" }`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Controls: (1) without `@Idempotent()`, the email is masked; (2) the lead as own data under
 * the field's name (`lead: StaffEntity`, no getter): the replay names `StaffEntity` and masks
 * it. Both pass.
 *
 * Severity: critical (masked data shown).
 */
let pool: Pool;

class StaffEntity {
  name!: string;

  @Exclude()
  email!: string;

  isLead!: boolean;
}

class TeamEntity {
  id!: number;
  members!: StaffEntity[];

  @Expose({ name: 'lead' })
  get leader(): StaffEntity | undefined {
    return this.members.find((member) => member.isLead);
  }
}

class PlainTeamEntity {
  id!: number;
  lead!: StaffEntity;
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

const staff = () => [
  Object.assign(new StaffEntity(), { name: 'Bob', email: 'bob@example.com', isLead: false }),
  Object.assign(new StaffEntity(), { name: 'Ann', email: 'ann@example.com', isLead: true }),
];

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
    return Object.assign(new TeamEntity(), { id: await this.insert(ref), members: staff() });
  }

  @Mutation(() => TeamModel)
  async createTeamPlain(@Args('ref') ref: string): Promise<TeamEntity> {
    return Object.assign(new TeamEntity(), { id: await this.insert(ref), members: staff() });
  }

  @Mutation(() => TeamModel)
  @Idempotent()
  async createPlainTeam(@Args('ref') ref: string): Promise<PlainTeamEntity> {
    return Object.assign(new PlainTeamEntity(), { id: await this.insert(ref), lead: staff()[1] });
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
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class TeamsModule {}

describe('adversary 51a: an exposed getter returning an instance with @Exclude()', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv51a_exposed_getter_instance', {
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

  it('control: the lead as own data: the replay is the first answer', async () => {
    const query = 'mutation { createPlainTeam(ref: "own") { id lead { name email } } }';
    const first = await send('own', query);
    const replay = await send('own', query);
    expect(first.body.data.createPlainTeam.lead).toEqual({ name: 'Ann', email: null });
    expect(replay.body).toEqual(replayedAs(first, 'createPlainTeam'));
    expect(await effects('own')).toBe(1);
  });

  it('the lead through an exposed getter: the replay masks the email, as the first answer did', async () => {
    const query = 'mutation { createTeam(ref: "get") { id lead { name email } } }';
    const first = await send('get', query);
    const replay = await send('get', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createTeam.lead).toEqual({ name: 'Ann', email: null });
    // Observed: lead { name: "Ann", email: "ann@example.com" }.
    expect(replay.body.data?.createTeam?.lead).toEqual({ name: 'Ann', email: null });
    expect(replay.body).toEqual(replayedAs(first, 'createTeam'));
    expect(await effects('get')).toBe(1);
  });
});
