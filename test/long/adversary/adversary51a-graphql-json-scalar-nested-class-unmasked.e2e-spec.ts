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
import { Exclude } from 'class-transformer';
import { GraphQLScalarType } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 51a: a field of a JSON scalar (identity `serialize`/`parseValue`, as
 * graphql-type-json's `GraphQLJSON`) holds an ARRAY of instances of a class class-transformer
 * knows (`class Device { name; @Exclude() pushToken }`), or a plain object holding one (`{
 * primary: Device }`). The app's global `ClassSerializerInterceptor` recurses into arrays and
 * nested plain objects and applies each instance's own class (`value.constructor`,
 * TransformOperationExecutor, CLASS_TO_PLAIN): the FIRST answer is `devices: [{ name: "phone"
 * }]`, the push token masked.
 *
 * Round 50a's fix (LEAF_CLASS) names the class of a scalar field's value on a replay only when
 * the value itself is an instance (lib/graphql/wire-value.ts:363-369: `!Array.isArray(item)`,
 * and only `transformedClassOf(item)` of the top object). An array of instances, or an instance
 * one level down in a plain object, is stored as the scalar writes it (the token included) and
 * replayed as plain objects (`leafValue`): the serializer finds no class, applies no
 * `@Exclude()`, and the replay answers the push token IN CLEAR.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global): `@ObjectType()
 * class Account { @Field(() => Int) id; @Field(() => GraphQLJSON) devices: Device[] }` and
 * `@ObjectType() class Profile { id; @Field(() => GraphQLJSON) settings: { primary: Device } }`.
 * `createAccount(ref)`/`createProfile(ref)` (`@Idempotent()`) insert a row and return them.
 *
 * What happens: first answer `devices: [{"name":"phone"}]`; replay `devices:
 * [{"name":"phone","pushToken":"push-arr"}]`; the same for `settings.primary`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Controls: (1) without `@Idempotent()` the serializer masks both (it is what masks); (2) a
 * single `Device` in the JSON field (round 50a's case) replays masked. Both pass.
 *
 * Severity: critical (masked data shown: the `@Exclude()`d token answered on every replay).
 */
let pool: Pool;

const GraphQLJSON = new GraphQLScalarType({
  name: 'JSON',
  serialize: (value) => value,
  parseValue: (value) => value,
});

class Device {
  name!: string;

  @Exclude()
  pushToken!: string;
}

@ObjectType()
class Account {
  @Field(() => Int)
  id!: number;

  @Field(() => GraphQLJSON)
  devices!: Device[];
}

@ObjectType()
class Profile {
  @Field(() => Int)
  id!: number;

  @Field(() => GraphQLJSON)
  settings!: { primary: Device };
}

@ObjectType()
class Phone {
  @Field(() => Int)
  id!: number;

  @Field(() => GraphQLJSON)
  device!: Device;
}

const deviceOf = (ref: string) =>
  Object.assign(new Device(), { name: 'phone', pushToken: `push-${ref}` });

@Resolver()
class AccountsResolver {
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

  @Mutation(() => Account)
  @Idempotent()
  async createAccount(@Args('ref') ref: string): Promise<Account> {
    return Object.assign(new Account(), { id: await this.insert(ref), devices: [deviceOf(ref)] });
  }

  @Mutation(() => Account)
  async createAccountPlain(@Args('ref') ref: string): Promise<Account> {
    return Object.assign(new Account(), { id: await this.insert(ref), devices: [deviceOf(ref)] });
  }

  @Mutation(() => Profile)
  @Idempotent()
  async createProfile(@Args('ref') ref: string): Promise<Profile> {
    return Object.assign(new Profile(), {
      id: await this.insert(ref),
      settings: { primary: deviceOf(ref) },
    });
  }

  @Mutation(() => Profile)
  async createProfilePlain(@Args('ref') ref: string): Promise<Profile> {
    return Object.assign(new Profile(), {
      id: await this.insert(ref),
      settings: { primary: deviceOf(ref) },
    });
  }

  @Mutation(() => Phone)
  @Idempotent()
  async createPhone(@Args('ref') ref: string): Promise<Phone> {
    return Object.assign(new Phone(), { id: await this.insert(ref), device: deviceOf(ref) });
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
    AccountsResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class AccountsModule {}

describe('adversary 51a: a JSON scalar holding instances of a class with @Exclude() in an array or one level down', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv51a_json_scalar_nested', {
      module: AccountsModule,
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

  it('control: without @Idempotent(), the serializer masks the tokens', async () => {
    const account = await send('p1', 'mutation { createAccountPlain(ref: "p1") { id devices } }');
    expect(account.body.data.createAccountPlain.devices).toEqual([{ name: 'phone' }]);
    const profile = await send('p2', 'mutation { createProfilePlain(ref: "p2") { id settings } }');
    expect(profile.body.data.createProfilePlain.settings).toEqual({ primary: { name: 'phone' } });
  });

  it('control: one Device in the JSON field: the replay is the first answer', async () => {
    const query = 'mutation { createPhone(ref: "one") { id device } }';
    const first = await send('one', query);
    const replay = await send('one', query);
    expect(first.body.data.createPhone.device).toEqual({ name: 'phone' });
    expect(replay.body).toEqual(replayedAs(first, 'createPhone'));
    expect(await effects('one')).toBe(1);
  });

  it('an array of Devices: the replay masks the tokens, as the first answer did', async () => {
    const query = 'mutation { createAccount(ref: "arr") { id devices } }';
    const first = await send('arr', query);
    const replay = await send('arr', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createAccount.devices).toEqual([{ name: 'phone' }]);
    // Observed: [{ name: "phone", pushToken: "push-arr" }].
    expect(replay.body.data?.createAccount?.devices).toEqual([{ name: 'phone' }]);
    expect(replay.body).toEqual(replayedAs(first, 'createAccount'));
    expect(await effects('arr')).toBe(1);
  });

  it('a Device one level down: the replay masks the token, as the first answer did', async () => {
    const query = 'mutation { createProfile(ref: "nested") { id settings } }';
    const first = await send('nested', query);
    const replay = await send('nested', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createProfile.settings).toEqual({ primary: { name: 'phone' } });
    // Observed: { primary: { name: "phone", pushToken: "push-nested" } }.
    expect(replay.body.data?.createProfile?.settings).toEqual({ primary: { name: 'phone' } });
    expect(replay.body).toEqual(replayedAs(first, 'createProfile'));
    expect(await effects('nested')).toBe(1);
  });
});
