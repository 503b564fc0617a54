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
 * Adversary, round 45b: under Nest's global `ClassSerializerInterceptor`, a `@Transform()`
 * that reads a sibling field of its object (`obj`, class-transformer's documented third
 * argument: mask the email of a private account) answers the first call masked and every
 * replay UNMASKED, when the client did not select the sibling. The replay differs from the
 * first answer, and shows what the app hid.
 *
 * The app (Apollo on Express, the pool seam, the serializer applied globally as Nest's recipe
 * says, default strategy): `@ObjectType() class Account { id; visibility; @Transform(({ value,
 * obj }) => (obj.visibility === 'private' ? null : value)) email }`. `openAccount(ref)`
 * (`@Idempotent()`) inserts a private account and returns `new Account(...)`. The client selects
 * `{ id email }`.
 *
 * What happens: at the first call the serializer (outside `@Idempotent()`) transforms the
 * resolver's own `Account`, whose `visibility` is 'private': `email: null`, as the app meant.
 * The library stored the resolver's value before that, as far as the client selected it
 * (`outputWire`, lib/graphql/wire-value.ts:203-211: unselected fields are kept only under a
 * union or an interface, or for a `@ResolveField()`): `{ id, email: "ada@..." }`, the
 * real address, and `__instance` (wire-value.ts:293). On a replay `fromWire` builds a plain
 * object that names `Account` as its constructor (wire-value.ts:468-470,
 * lib/graphql/nest-fields.ts:88-99), "where class-transformer looks the class up": the
 * serializer finds the class and runs its `@Transform()` again, on an object with no
 * `visibility`: `obj.visibility` is undefined, and the email is answered in clear. Nothing is
 * logged (no loss is seen: the value was an instance of the class with data only).
 *
 * Expected: the replay is the first answer (`email: null`), plus the replay marker.
 *
 * Control: the client selects `visibility` too: it is stored, the transform reads it on the
 * replay, and the replay is the first answer. Passes.
 *
 * Severity: critical (a wrong answer replayed, which discloses data the app masked).
 */
let pool: Pool;

@ObjectType()
class Account {
  @Field(() => Int)
  id!: number;

  @Field()
  visibility!: string;

  @Field(() => String, { nullable: true })
  @Transform(({ value, obj }: { value: string; obj: Account }) =>
    obj.visibility === 'private' ? null : value,
  )
  email!: string | null;

  constructor(id: number, visibility: string, email: string) {
    this.id = id;
    this.visibility = visibility;
    this.email = email;
  }
}

@Resolver()
class AccountsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Account)
  @Idempotent()
  async openAccount(@Args('ref') ref: string): Promise<Account> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return new Account(rows[0].id, 'private', `${ref}@example.com`);
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

describe('adversary 45b: a serializer @Transform() reading an unselected sibling', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv45b_transform_obj', {
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
      .timeout(5_000)
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

  it('control: visibility selected too: the replay is the first answer', async () => {
    const query = 'mutation { openAccount(ref: "ctl") { id visibility email } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body).toEqual({
      data: { openAccount: { id: expect.any(Number), visibility: 'private', email: null } },
    });
    expect(replay.body).toEqual(replayedAs(first, 'openAccount'));
    expect(await effects('ctl')).toBe(1);
  });

  it('only id and email selected: the replay is the first answer (email masked)', async () => {
    const query = 'mutation { openAccount(ref: "ada") { id email } }';
    const first = await send('ada', query);
    const replay = await send('ada', query);
    expect(first.body).toEqual({ data: { openAccount: { id: expect.any(Number), email: null } } });
    // Observed: the replay answers email "ada@example.com".
    expect(replay.body).toEqual(replayedAs(first, 'openAccount'));
    expect(await effects('ada')).toBe(1);
  });
});
