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
 * Adversary, round 48a: the resolver returns an instance of the app's ENTITY class (a class of
 * its own, with class-transformer decorators) for a GraphQL type whose class is a separate
 * model (`@ObjectType() class MemberModel`), the ordinary entity/model split of a Nest app.
 * `ClassSerializerInterceptor` applies the entity's `@Transform()` to the first answer (it
 * looks the value's own class up: `MemberEntity`). A replay names a class only for an object
 * that is an instance of the Nest type's class (`isOfNestType`, lib/graphql/nest-fields.ts:77-80,
 * used at lib/graphql/wire-value.ts:219-220 and 305; `INSTANCE` unset), and keeps the whole
 * data only then (`hasClassMetadata(nestTarget(...))`, wire-value.ts:220, reads the MODEL's
 * metadata, not the value's class's). The replay is a bare plain object, the serializer finds
 * no class and no transform, and the email the entity's transform masked is answered IN
 * CLEAR, even with every field selected. The guide (docs/guides/graphql.md:382-384) says only
 * values "whose classes class-transformer does not know (a plain row, a DTO of another class)"
 * are serialized on a replay as plain objects; this class it knows.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global):
 * `class MemberEntity { id; visibility; @Transform(({ value, obj }) => obj.visibility ===
 * 'private' ? null : value) email }` (no `@ObjectType()`: the persistence class, also used by
 * REST routes), and `@ObjectType() class MemberModel { id; visibility; email }`.
 * `createMember(ref)` (`@Idempotent()`, `@Mutation(() => MemberModel)`) returns a
 * `MemberEntity`. The client selects `{ id visibility email }`.
 *
 * What happens: first answer `email: null`; replay `email: "ent@example.com"`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same transform on the model class itself, returning a model instance
 * (`createModel`): the replay is the first answer. Passes.
 *
 * Severity: critical (a wrong answer replayed, which discloses data the app masked).
 */
let pool: Pool;

class MemberEntity {
  id!: number;
  visibility!: string;

  @Transform(({ value, obj }: { value: string; obj: MemberEntity }) =>
    obj.visibility === 'private' ? null : value,
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

@ObjectType('Masked')
class MaskedModel {
  @Field(() => Int)
  id!: number;

  @Field()
  visibility!: string;

  @Field(() => String, { nullable: true })
  @Transform(({ value, obj }: { value: string; obj: MaskedModel }) =>
    obj.visibility === 'private' ? null : value,
  )
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

  @Mutation(() => MaskedModel)
  @Idempotent()
  async createModel(@Args('ref') ref: string): Promise<MaskedModel> {
    return Object.assign(new MaskedModel(), {
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

describe('adversary 48a: an entity of another class replays without its transform', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv48a_entity_class', {
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

  it('control: the model class carries the transform: the replay is the first answer', async () => {
    const query = 'mutation { createModel(ref: "ctl") { id visibility email } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body.data.createModel.email).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createModel'));
    expect(await effects('ctl')).toBe(1);
  });

  it('an entity instance: the replay masks the email as the first answer did', async () => {
    const query = 'mutation { createMember(ref: "ent") { id visibility email } }';
    const first = await send('ent', query);
    const replay = await send('ent', query);
    expect(first.body.data.createMember.email).toBeNull();
    // Observed: the replay answers email "ent@example.com".
    expect(replay.body.data?.createMember?.email).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createMember'));
    expect(await effects('ent')).toBe(1);
  });
});
