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
 * Adversary, round 50a: an entity's `@Transform()` masks a field by a GETTER of the entity's
 * class: `get isPrivate() { return this.visibility !== 'public'; }` and `@Transform(({ value,
 * obj }) => (obj.isPrivate ? null : value)) email`, the same rule as rounds 46-48's
 * `obj.visibility === 'private'`, written once as a getter of the domain class. The app's
 * global `ClassSerializerInterceptor` runs the transform on the resolver's entity: the FIRST
 * answer is `email: null`.
 *
 * The replay names the entity's class (round 48a) and keeps all its own data (`visibility`
 * included), but it is a plain object, not an instance: "no getter or method of the class runs
 * on the replay's data" (`plainNaming`, lib/graphql/nest-fields.ts:99-108; `namedPlain`,
 * lib/graphql/wire-value.ts:368-388). `obj.isPrivate` is undefined on it, the transform keeps the
 * value, and the replay answers the email IN CLEAR. The log says only that the replay is "a plain
 * object ... without isPrivate of its class" (wire-value.ts:348-356); the guide says the
 * serializer "masks a replay as it masked the first answer" and that a transform may read any of
 * the value, never that one reading a getter unmasks.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global):
 * `class MemberEntity { id; visibility; get isPrivate(); @Transform(mask when obj.isPrivate)
 * email }`, `@ObjectType('Member') class MemberModel { id; visibility; email (nullable) }`.
 * `createMember(ref)` (`@Idempotent()`, `@Mutation(() => MemberModel)`) inserts a row and
 * returns the entity, `visibility: 'private'`. The client selects `{ id visibility email }`.
 *
 * What happens: first answer `email: null`; replay `email: "key@example.com"`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same transform reading the data itself (`obj.visibility !== 'public'`): the replay
 * is the first answer. Passes.
 *
 * Severity: critical (masked data shown on every replay).
 */
let pool: Pool;

class MemberEntity {
  id!: number;
  visibility!: string;

  get isPrivate(): boolean {
    return this.visibility !== 'public';
  }

  @Transform(({ value, obj }: { value: string; obj: MemberEntity }) =>
    obj.isPrivate ? null : value,
  )
  email!: string | null;
}

class DataMemberEntity {
  id!: number;
  visibility!: string;

  @Transform(({ value, obj }: { value: string; obj: DataMemberEntity }) =>
    obj.visibility !== 'public' ? null : value,
  )
  email!: string | null;
}

@ObjectType('Member')
class MemberModel {
  @Field(() => Int)
  id!: number;

  @Field()
  visibility!: string;

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
    return Object.assign(new MemberEntity(), {
      id: await this.insert(ref),
      visibility: 'private',
      email: `${ref}@example.com`,
    });
  }

  @Mutation(() => MemberModel)
  @Idempotent()
  async createDataMember(@Args('ref') ref: string): Promise<DataMemberEntity> {
    return Object.assign(new DataMemberEntity(), {
      id: await this.insert(ref),
      visibility: 'private',
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

describe("adversary 50a: an entity's @Transform() that masks by a getter of its class", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv50a_transform_reads_getter', {
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

  it('control: the transform reads the data itself: the replay is the first answer', async () => {
    const query = 'mutation { createDataMember(ref: "data") { id visibility email } }';
    const first = await send('data', query);
    const replay = await send('data', query);
    expect(first.body.data.createDataMember.email).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createDataMember'));
    expect(await effects('data')).toBe(1);
  });

  it('the transform reads a getter: the replay masks the email, as the first answer did', async () => {
    const query = 'mutation { createMember(ref: "key") { id visibility email } }';
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
