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
import { Transform, Type } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 47a (second break): a nested object that is a plain object (a TypeORM
 * `jsonb` column, what a JSON column always is), typed for class-transformer with `@Type(() =>
 * Settings)` on its parent. `ClassSerializerInterceptor` applies `Settings`' `@Transform()` to
 * it (class-transformer takes the nested class from the parent's `@Type()`), at the first
 * answer and, since the replay's parent names `Profile` as its constructor, at a replay too.
 * But round 46's fix keeps the unselected own data only of an object that is exactly an
 * instance of its Nest class (wire-value.ts:211-216, `isOfNestType`, nest-fields.ts:77-80):
 * the plain `settings` keeps nothing unselected, so its transform reads `obj.visibility`
 * undefined on the replay and answers the masked email IN CLEAR.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global):
 * `@ObjectType() class Settings { visibility; @Transform(({ value, obj }) => obj.visibility
 * === 'private' ? null : value) email }`, `@ObjectType() class Profile { id; @Type(() =>
 * Settings) settings: Settings }`. `createProfile(ref)` (`@Idempotent()`) inserts a row and
 * returns a `Profile` instance whose `settings` is the JSON column's plain object. The client
 * selects `{ id settings { email } }`.
 *
 * What happens: first answer `email: null`; replay `email: "pub@example.com"`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same selecting `settings { visibility email }`: the replay is the first answer.
 * Passes.
 *
 * Severity: critical (a wrong answer replayed, which discloses data the app masked).
 */
let pool: Pool;

@ObjectType()
class Settings {
  @Field()
  visibility!: string;

  @Field(() => String, { nullable: true })
  @Transform(({ value, obj }: { value: string; obj: Settings }) =>
    obj.visibility === 'private' ? null : value,
  )
  email!: string | null;
}

@ObjectType()
class Profile {
  @Field(() => Int)
  id!: number;

  @Field(() => Settings)
  @Type(() => Settings)
  settings!: Settings;
}

@Resolver()
class ProfilesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Profile)
  @Idempotent()
  async createProfile(@Args('ref') ref: string): Promise<Profile> {
    const { rows } = await pool.query<{ id: number; settings: Settings }>(
      'INSERT INTO effects (ref, settings) VALUES ($1, $2) RETURNING id, settings',
      [ref, { visibility: 'private', email: `${ref}@example.com` }],
    );
    return Object.assign(new Profile(), rows[0]);
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
    ProfilesResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class ProfilesModule {}

describe('adversary 47a: a plain nested object typed by @Type() keeps no unselected data', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv47a_type_plain_child', {
      module: ProfilesModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE effects (id serial PRIMARY KEY, ref text NOT NULL, settings jsonb)',
        );
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

  it('control: settings { visibility email } selected: the replay is the first answer', async () => {
    const query = 'mutation { createProfile(ref: "ctl") { id settings { visibility email } } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body.data.createProfile.settings.email).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createProfile'));
    expect(await effects('ctl')).toBe(1);
  });

  it('settings { email } selected: the replay masks the email as the first answer did', async () => {
    const query = 'mutation { createProfile(ref: "pub") { id settings { email } } }';
    const first = await send('pub', query);
    const replay = await send('pub', query);
    expect(first.body.data.createProfile.settings.email).toBeNull();
    // Observed: the replay answers email "pub@example.com".
    expect(replay.body.data?.createProfile?.settings?.email).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createProfile'));
    expect(await effects('pub')).toBe(1);
  });
});
