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
 * Adversary, round 46a: round 45b's fix keeps an instance's unselected own data for an outer
 * serializer's `@Transform()` that reads a sibling, within ONE budget for the whole answer (a
 * quarter of `maxResponseBytes`, lib/graphql/wire-value.ts:152 and keepUnselected,
 * wire-value.ts:374-403), spent item by item, field by field, in list order. In a list of
 * instances, the early items' unselected text spends it; each later item's small `visibility`
 * is then kept as long as 9 bytes remain, and after that is left out. On a replay those later
 * items' `@Transform()` reads `obj.visibility` undefined and answers their masked email IN
 * CLEAR: the 45b disclosure is back for the tail of any long enough list.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` applied globally as
 * Nest's recipe says, default `maxResponseBytes` of 1 MiB): `@ObjectType() class Account { id;
 * bio; visibility; @Transform(({ value, obj }) => obj.visibility === 'private' ? null : value)
 * email }`. `importAccounts(ref, count)` (`@Idempotent()`) inserts `count` private accounts in
 * one statement and returns them as `Account` instances, each with a 3000-character bio (what
 * a profile column holds). The client selects `{ id email }`: a 150-item answer of ~6 KB.
 *
 * What happens: the budget is 262144 bytes; 87 bios of 3002 bytes (as JSON) fit, the rest do
 * not; the visibilities ('"private"', 9 bytes each) use up what remains at about item 108;
 * from there `visibility` is not kept (wire-value.ts:388-391, logged as "over a quarter of
 * maxResponseBytes", which a 9-byte string is not). The first answer masks all 150 emails
 * (the serializer ran on the resolver's own instances); the replay answers the last ~40 in
 * clear.
 *
 * Expected: the replay is the first answer (every email null), plus the replay marker. The
 * sibling a transform reads is tiny: what a budget should leave out is the large text, not
 * the small fields of the items that happen to come last.
 *
 * Control: the same with 20 accounts (the budget is not used up): the replay is the first
 * answer. Passes.
 *
 * Severity: critical (a wrong answer replayed, which discloses data the app masked).
 */
let pool: Pool;

@ObjectType()
class Account {
  @Field(() => Int)
  id!: number;

  @Field()
  bio!: string;

  @Field()
  visibility!: string;

  @Field(() => String, { nullable: true })
  @Transform(({ value, obj }: { value: string; obj: Account }) =>
    obj.visibility === 'private' ? null : value,
  )
  email!: string | null;

  constructor(id: number, bio: string, visibility: string, email: string) {
    this.id = id;
    this.bio = bio;
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

  @Mutation(() => [Account])
  @Idempotent()
  async importAccounts(
    @Args('ref') ref: string,
    @Args('count', { type: () => Int }) count: number,
  ): Promise<Account[]> {
    const { rows } = await pool.query<{ id: number; n: number }>(
      'INSERT INTO effects (ref) SELECT $1 FROM generate_series(1, $2) RETURNING id',
      [ref, count],
    );
    return rows.map(
      (row, i) =>
        new Account(row.id, `bio ${i} `.padEnd(3000, '.'), 'private', `${ref}${i}@example.com`),
    );
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

describe('adversary 46a: a long list of instances starves the unselected-data budget', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv46a_list_budget', {
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
  const unmasked = (body: { data?: { importAccounts?: { email: unknown }[] } }) =>
    (body.data?.importAccounts ?? []).filter((account) => account.email !== null).length;

  it('control: 20 accounts: the replay is the first answer (every email masked)', async () => {
    const query = 'mutation { importAccounts(ref: "ctl", count: 20) { id email } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body.data.importAccounts).toHaveLength(20);
    expect(unmasked(first.body)).toBe(0);
    expect(replay.body).toEqual(replayedAs(first, 'importAccounts'));
    expect(await effects('ctl')).toBe(20);
  });

  it('150 accounts: the replay is the first answer (every email masked)', async () => {
    const query = 'mutation { importAccounts(ref: "bulk", count: 150) { id email } }';
    const first = await send('bulk', query);
    const replay = await send('bulk', query);
    expect(first.body.data.importAccounts).toHaveLength(150);
    expect(unmasked(first.body)).toBe(0);
    // Observed: the last ~40 accounts' emails are answered in clear on the replay.
    expect(unmasked(replay.body)).toBe(0);
    expect(replay.body).toEqual(replayedAs(first, 'importAccounts'));
    expect(await effects('bulk')).toBe(150);
  });
});
