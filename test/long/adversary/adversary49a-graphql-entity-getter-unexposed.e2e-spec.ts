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
 * Adversary, round 49a: the resolver returns an ENTITY (class-transformer decorators of its own)
 * for a model type; the entity also has an ordinary getter (`get label()`, no `@Expose()`) that
 * the model exposes as a nullable field. The app's global `ClassSerializerInterceptor` turns
 * the entity into a plain object with its own keys only (class-transformer copies no
 * prototype getter that is not exposed), so GraphQL's FIRST answer is `label: null`. The
 * library stores the selected field as GraphQL's default resolver would read it from the RAW
 * entity, the getter included (lib/graphql/wire-value.ts:246-291, "a class's getters
 * included"), and the replay builds an object with `label` as an own data key, named by the
 * entity's class (wire-value.ts:229-237, 322-323; `namedPlain`, :359-371): the serializer now
 * copies it, and the replay answers `label: "..."` where the first answer was null.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global):
 * `class MemberEntity { id; visibility; @Transform(mask when private) email; get label() }`,
 * `@ObjectType('Member') class MemberModel { id; visibility; email; label (nullable) }`.
 * `createMember(ref)` (`@Idempotent()`, `@Mutation(() => MemberModel)`) returns the entity.
 *
 * What happens: first answer `label: null`; replay `label: "member get@example.com"`: the email the
 * entity's transform masks (`email: null` in both answers) is shown through the getter.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same entity, the client not selecting `label`: the replay is the first answer.
 * Passes.
 *
 * Severity: high (a wrong answer replayed, and one that discloses the masked email: a field
 * the first answer gave as null is given a value computed from the raw entity).
 */
let pool: Pool;

class MemberEntity {
  id!: number;
  visibility!: string;

  @Transform(({ value, obj }: { value: string; obj: MemberEntity }) =>
    obj.visibility === 'private' ? null : value,
  )
  email!: string | null;

  get label(): string {
    return `member ${this.email}`;
  }
}

@ObjectType('Member')
class MemberModel {
  @Field(() => Int)
  id!: number;

  @Field()
  visibility!: string;

  @Field(() => String, { nullable: true })
  email!: string | null;

  @Field(() => String, { nullable: true })
  label!: string | null;
}

@Resolver()
class MembersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => MemberModel)
  @Idempotent()
  async createMember(@Args('ref') ref: string): Promise<MemberEntity> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return Object.assign(new MemberEntity(), {
      id: rows[0].id,
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

describe('adversary 49a: an unexposed getter of an entity, null at first, a value on the replay', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv49a_entity_getter', {
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

  it('control: label not selected: the replay is the first answer', async () => {
    const query = 'mutation { createMember(ref: "ctl") { id visibility email } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body.data.createMember.email).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createMember'));
    expect(await effects('ctl')).toBe(1);
  });

  it('label selected: the replay answers it null, as the first answer did', async () => {
    const query = 'mutation { createMember(ref: "get") { id visibility email label } }';
    const first = await send('get', query);
    const replay = await send('get', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createMember.label).toBeNull();
    // Observed: the replay answers label "member get@example.com".
    expect(replay.body.data?.createMember?.label).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createMember'));
    expect(await effects('get')).toBe(1);
  });
});
