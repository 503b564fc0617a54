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
import { Transform } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 51a: round 50a's GOTTEN reads what a serialized class's getters give, but
 * skips "a getter with a setter" (lib/graphql/wire-value.ts:140: `if (!descriptor?.get ||
 * descriptor.set) continue;`), meant for a TypeORM lazy relation. An ordinary accessor PAIR of
 * the domain class is skipped with it: `private flags` (a bit-flag column) with `get isPrivate()
 * { return (this.flags & 1) === 1; }` and `set isPrivate(v)`, and `@Transform(({ value, obj })
 * => (obj.isPrivate ? null : value)) email` (the same rule as round 50a's, the flag written
 * through a setter too). The app's global `ClassSerializerInterceptor` masks the first answer:
 * `email: null`.
 *
 * The replay names the entity's class and keeps its own data (`flags` included), but it is a
 * plain object with no accessor, and `isPrivate` was not kept: `obj.isPrivate` is undefined,
 * the transform keeps the value, and the replay answers the email IN CLEAR. The guide says "a
 * getter with a setter, a TypeORM lazy relation's, is not read: it loads"; an app's own
 * accessor pair does not load anything.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global): `class
 * MemberEntity { id; private flags; get/set isPrivate; @Transform(mask when obj.isPrivate)
 * email }`, `@ObjectType('Member') class MemberModel { id; email (nullable) }`.
 * `createMember(ref)` (`@Idempotent()`) inserts a row and returns the entity with `isPrivate =
 * true`. The client selects `{ id email }`.
 *
 * What happens: first answer `email: null`; replay `email: "key@example.com"`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same with a getter alone (round 50a's case): the replay is the first answer.
 * Passes.
 *
 * Severity: critical (masked data shown on every replay).
 */
let pool: Pool;

class MemberEntity {
  id!: number;
  private flags = 0;

  get isPrivate(): boolean {
    return (this.flags & 1) === 1;
  }

  set isPrivate(value: boolean) {
    this.flags = value ? this.flags | 1 : this.flags & ~1;
  }

  @Transform(({ value, obj }: { value: string; obj: MemberEntity }) =>
    obj.isPrivate ? null : value,
  )
  email!: string | null;
}

class GetterMemberEntity {
  id!: number;
  flags = 0;

  get isPrivate(): boolean {
    return (this.flags & 1) === 1;
  }

  @Transform(({ value, obj }: { value: string; obj: GetterMemberEntity }) =>
    obj.isPrivate ? null : value,
  )
  email!: string | null;
}

@ObjectType('Member')
class MemberModel {
  @Field(() => Int)
  id!: number;

  @Field(() => String, { nullable: true })
  email!: string | null;
}

@Resolver()
class MembersResolver {
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

  @Mutation(() => MemberModel)
  @Idempotent()
  async createMember(@Args('ref') ref: string): Promise<MemberEntity> {
    const member = Object.assign(new MemberEntity(), {
      id: await this.insert(ref),
      email: `${ref}@example.com`,
    });
    member.isPrivate = true;
    return member;
  }

  @Mutation(() => MemberModel)
  @Idempotent()
  async createGetterMember(@Args('ref') ref: string): Promise<GetterMemberEntity> {
    return Object.assign(new GetterMemberEntity(), {
      id: await this.insert(ref),
      flags: 1,
      email: `${ref}@example.com`,
    });
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
    MembersResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class MembersModule {}

describe('adversary 51a: a @Transform() masking by an accessor pair (get and set) of the entity', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv51a_transform_accessor_pair', {
      module: MembersModule,
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

  it('control: a getter alone: the replay is the first answer', async () => {
    const query = 'mutation { createGetterMember(ref: "ctl") { id email } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body.data.createGetterMember.email).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createGetterMember'));
    expect(await effects('ctl')).toBe(1);
  });

  it('an accessor pair: the replay masks the email, as the first answer did', async () => {
    const query = 'mutation { createMember(ref: "key") { id email } }';
    const first = await send('key', query);
    const replay = await send('key', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createMember.email).toBeNull();
    // Observed: the replay answers email "key@example.com".
    expect(replay.body.data?.createMember?.email).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createMember'));
    expect(await effects('key')).toBe(1);
  });
});
