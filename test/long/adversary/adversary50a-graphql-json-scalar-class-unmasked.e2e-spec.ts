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
import { Exclude, Type } from 'class-transformer';
import { GraphQLScalarType } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 50a: a field of a JSON scalar (graphql-type-json's `GraphQLJSON`, whose
 * `serialize()` and `parseValue()` give the value as it is) holds an instance of a class that
 * class-transformer knows: `class Prefs { theme; @Exclude() resetToken }`. The app's global
 * `ClassSerializerInterceptor` (Nest's recipe) turns the resolver's `Account` into a plain
 * object before GraphQL reads it, and class-transformer, finding no `@Type()` for `prefs`,
 * takes the nested value's own class (`value.constructor`, TransformOperationExecutor) and
 * applies `Prefs`' `@Exclude()`: the FIRST answer is `prefs: { theme: "dark" }`.
 *
 * The library stores the selected leaf `prefs` as its scalar writes it from the RAW value
 * (`leafWire(type.serialize(value))`, lib/graphql/wire-value.ts:201, then `JSON.stringify` in
 * `encodeAnswer`, field-answer.ts): `{ theme, resetToken }`, the excluded token included. The
 * stored form does not give the instance back (`fromWireAgain`, wire-value.ts:308), and typed
 * JSON does not keep a class either (`keepsExactly` false, :310), so it is only said in the log
 * as a loss (:313-319). A replay gives `prefs` as the plain object `{ theme, resetToken }`
 * (`leafValue`, :791-797): the serializer finds no class for it (constructor `Object`), applies
 * no `@Exclude()`, and the replay answers the reset token IN CLEAR.
 *
 * The guide (docs/guides/graphql.md, "What is stored, and replayed") says the serializer masks
 * a replay as it masked the first answer for a class class-transformer knows; it says a value
 * of another class "comes back as that data" and is logged, but for "an entity's helpers that
 * no resolver under the mutation calls", never that an `@Exclude()`d member is then answered.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global): `@ObjectType()
 * class Account { @Field(() => Int) id; @Field(() => GraphQLJSON) prefs: Prefs }` (the JSON
 * scalar is written here as graphql-type-json writes it: identity `serialize`/`parseValue`).
 * `createAccount(ref)` (`@Idempotent()`) inserts a row and returns `new Account` with a `new
 * Prefs` in `prefs`. The client selects `{ id prefs }`.
 *
 * What happens: first answer `prefs: {"theme":"dark"}`; replay `prefs:
 * {"theme":"dark","resetToken":"tok-key"}`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Controls: (1) the same mutation without `@Idempotent()` answers `{ theme }` only (the
 * serializer is what masks); (2) the same with `@Type(() => Prefs)` on `Account.prefs`: the
 * replay names `Account`, whose `@Type()` gives the serializer `Prefs` again: the replay is the
 * first answer. Both pass.
 *
 * Severity: critical (masked data shown: the `@Exclude()`d token answered on every replay).
 */
let pool: Pool;

const GraphQLJSON = new GraphQLScalarType({
  name: 'JSON',
  serialize: (value) => value,
  parseValue: (value) => value,
});

class Prefs {
  theme!: string;

  @Exclude()
  resetToken!: string;
}

@ObjectType()
class Account {
  @Field(() => Int)
  id!: number;

  @Field(() => GraphQLJSON)
  prefs!: Prefs;
}

@ObjectType()
class TypedAccount {
  @Field(() => Int)
  id!: number;

  @Field(() => GraphQLJSON)
  @Type(() => Prefs)
  prefs!: Prefs;
}

const prefsOf = (ref: string) =>
  Object.assign(new Prefs(), { theme: 'dark', resetToken: `tok-${ref}` });

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
    return Object.assign(new Account(), { id: await this.insert(ref), prefs: prefsOf(ref) });
  }

  @Mutation(() => Account)
  async createAccountPlain(@Args('ref') ref: string): Promise<Account> {
    return Object.assign(new Account(), { id: await this.insert(ref), prefs: prefsOf(ref) });
  }

  @Mutation(() => TypedAccount)
  @Idempotent()
  async createTypedAccount(@Args('ref') ref: string): Promise<TypedAccount> {
    return Object.assign(new TypedAccount(), { id: await this.insert(ref), prefs: prefsOf(ref) });
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

describe('adversary 50a: a JSON scalar field holding an instance of a class with @Exclude()', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv50a_json_scalar_class', {
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

  it('control: without @Idempotent(), the serializer masks the token', async () => {
    const first = await send('plain', 'mutation { createAccountPlain(ref: "plain") { id prefs } }');
    expect(first.body.data.createAccountPlain.prefs).toEqual({ theme: 'dark' });
  });

  it('control: prefs typed with @Type(() => Prefs): the replay is the first answer', async () => {
    const query = 'mutation { createTypedAccount(ref: "typed") { id prefs } }';
    const first = await send('typed', query);
    const replay = await send('typed', query);
    expect(first.body.data.createTypedAccount.prefs).toEqual({ theme: 'dark' });
    expect(replay.body).toEqual(replayedAs(first, 'createTypedAccount'));
    expect(await effects('typed')).toBe(1);
  });

  it('the replay masks the token, as the first answer did', async () => {
    const query = 'mutation { createAccount(ref: "key") { id prefs } }';
    const first = await send('key', query);
    const replay = await send('key', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createAccount.prefs).toEqual({ theme: 'dark' });
    // Observed: the replay answers prefs { theme: "dark", resetToken: "tok-key" }.
    expect(replay.body.data?.createAccount?.prefs).toEqual({ theme: 'dark' });
    expect(replay.body).toEqual(replayedAs(first, 'createAccount'));
    expect(await effects('key')).toBe(1);
  });
});
