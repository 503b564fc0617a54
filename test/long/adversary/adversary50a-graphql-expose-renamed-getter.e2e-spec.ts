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
import { Expose } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 50a: the resolver returns an ENTITY for a model type (the entity/model split
 * the guide covers since round 48a), and the entity gives a model field through a getter that
 * class-transformer EXPOSES UNDER THE FIELD'S NAME: `@Expose({ name: 'displayName' }) get
 * fullName()` (class-transformer's documented way to put a getter in the output under another
 * name). The app's global `ClassSerializerInterceptor` calls the getter and writes
 * `displayName`, so the FIRST answer is `displayName: "Ann Lee"`.
 *
 * The library stores each selected field as GraphQL's default resolver reads the RAW value,
 * by its schema name (lib/graphql/wire-value.ts:272-281): the entity has no `displayName`, so it
 * is stored as null ("Selected and absent", :276-280); the getter `fullName` is a member of the
 * class, which the replay does not have (only said in the log as a loss, :348-356). The
 * replay's object names `UserEntity` (round 48a), and the serializer looks for the exposed
 * `fullName` on it: there is none, so it writes `displayName: null`, and GraphQL answers
 * "Cannot return null for non-nullable field User.displayName": `data: null` on every retry.
 * The guide says the serializer applies an entity's `@Expose()` to a replay as to the first
 * answer.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global):
 * `class UserEntity { id; first; last; @Expose({ name: 'displayName' }) get fullName() }`,
 * `@ObjectType('User') class UserModel { @Field(() => Int) id; @Field() displayName }`.
 * `createUser(ref)` (`@Idempotent()`, `@Mutation(() => UserModel)`) inserts a row and returns
 * the entity. The client selects `{ id displayName }`.
 *
 * What happens: first answer `{ id, displayName: "Ann Lee" }`; replay `data: null` with the
 * non-null error. (With a nullable field, the replay answers `displayName: null`.)
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same rename on a plain property (`@Expose({ name: 'displayName' }) fullName:
 * string`, own data kept with the replay): the replay is the first answer. Passes.
 *
 * Severity: critical (two final answers for one key: the data at first, an error on every
 * replay).
 */
let pool: Pool;

class UserEntity {
  id!: number;
  first!: string;
  last!: string;

  @Expose({ name: 'displayName' })
  get fullName(): string {
    return `${this.first} ${this.last}`;
  }
}

class StoredUserEntity {
  id!: number;

  @Expose({ name: 'displayName' })
  fullName!: string;
}

@ObjectType('User')
class UserModel {
  @Field(() => Int)
  id!: number;

  @Field()
  displayName!: string;
}

@Resolver()
class UsersResolver {
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

  @Mutation(() => UserModel)
  @Idempotent()
  async createUser(@Args('ref') ref: string): Promise<UserEntity> {
    return Object.assign(new UserEntity(), {
      id: await this.insert(ref),
      first: 'Ann',
      last: 'Lee',
    });
  }

  @Mutation(() => UserModel)
  @Idempotent()
  async createStoredUser(@Args('ref') ref: string): Promise<StoredUserEntity> {
    return Object.assign(new StoredUserEntity(), {
      id: await this.insert(ref),
      fullName: 'Ann Lee',
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
    UsersResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class UsersModule {}

describe('adversary 50a: an entity getter exposed under the field name by @Expose({ name })', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv50a_expose_renamed_getter', {
      module: UsersModule,
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

  it('control: the rename on a plain property: the replay is the first answer', async () => {
    const query = 'mutation { createStoredUser(ref: "prop") { id displayName } }';
    const first = await send('prop', query);
    const replay = await send('prop', query);
    expect(first.body.data.createStoredUser.displayName).toBe('Ann Lee');
    expect(replay.body).toEqual(replayedAs(first, 'createStoredUser'));
    expect(await effects('prop')).toBe(1);
  });

  it('the renamed getter: the replay is the first answer', async () => {
    const query = 'mutation { createUser(ref: "get") { id displayName } }';
    const first = await send('get', query);
    const replay = await send('get', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createUser.displayName).toBe('Ann Lee');
    // Observed: data null, "Cannot return null for non-nullable field User.displayName."
    expect(replay.body.errors).toBeUndefined();
    expect(replay.body).toEqual(replayedAs(first, 'createUser'));
    expect(await effects('get')).toBe(1);
  });
});
