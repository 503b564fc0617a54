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
import { Exclude, Expose, Transform } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../lib/index.js';
import { type PoolApp, startPoolApp } from '../support/pool-app.js';

/**
 * A mutation's value under Nest's `ClassSerializerInterceptor`, which sits outside
 * `@Idempotent()` and reads the value's class (its `@Expose()`, `@Exclude()`, `@Transform()`)
 * at the first answer and again at every replay: a replay makes the stored data an instance of
 * the class again, so the serializer gives the same answer (round 43b found `{}` under
 * `excludeAll`, and every replay failing on a non-null field). A selection smaller than the
 * class's exposed fields replays too, and the whole own data of a class class-transformer
 * serializes is kept for its transforms to read again (45b, 46a, 47a).
 */
let pool: Pool;

@ObjectType()
@Exclude()
class Card {
  @Field(() => Int)
  @Expose()
  id!: number;

  @Field()
  @Expose()
  holder!: string;

  @Field()
  @Expose()
  last4!: string;

  /** Never leaves the server. */
  pinHash!: string;

  constructor(row: Partial<Card>) {
    Object.assign(this, row);
  }
}

@ObjectType()
class Voucher {
  @Field()
  code!: string;

  /** Shown masked: the serializer's `@Transform()` runs on every answer. */
  @Field()
  @Transform(({ value }) => `****${String(value).slice(-2)}`, { toPlainOnly: true })
  secret!: string;

  /** A schema field the serializer drops: null in every answer. */
  @Field(() => String, { nullable: true })
  @Exclude({ toPlainOnly: true })
  internalNote!: string;

  constructor(data: Partial<Voucher>) {
    Object.assign(this, data);
  }
}

/** Masks `email` when `visibility` is private (read from the object, selected or not). */
const masked = () =>
  Transform(
    ({ value, obj }: { value: string; obj: { visibility: string } }) =>
      obj.visibility === 'private' ? null : value,
    { toPlainOnly: true },
  );

/** The entity/model split: the app's own class (class-transformer's) for a model type. */
class OwnerEntity {
  id!: number;
  visibility!: string;
  @masked()
  email!: string | null;

  constructor(data: Partial<OwnerEntity>) {
    Object.assign(this, data);
  }
}

/** Two entity classes of one name (the same name in two modules): a replay cannot tell them. */
function twinClass() {
  class Twin {
    id!: number;
    visibility!: string;
    @masked()
    email!: string | null;
  }
  return Twin;
}
const Twin = twinClass();
twinClass(); // the other one

@ObjectType()
class Owner {
  @Field(() => Int)
  id!: number;

  @Field()
  visibility!: string;

  @Field(() => String, { nullable: true })
  email!: string | null;
}

@ObjectType()
class Account {
  @Field(() => Int)
  id!: number;

  @Field(() => Owner)
  owner!: Owner;
}

@Resolver(() => Card)
class CardsResolver {
  @Mutation(() => Account)
  @Idempotent()
  async openAccount(
    @Args('holder') holder: string,
    @Args('twin', { nullable: true }) twin?: boolean,
  ): Promise<Account> {
    const { rows } = await pool.query<{ id: number }>(
      `INSERT INTO cards (holder, last4, pin_hash) VALUES ($1, '0000', '-') RETURNING id`,
      [holder],
    );
    const data = { id: 7, visibility: 'private', email: 'owner@example.com' };
    const owner = twin ? Object.assign(new Twin(), data) : new OwnerEntity(data);
    return { id: rows[0].id, owner };
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Card)
  @Idempotent()
  async issueCard(@Args('holder') holder: string): Promise<Card> {
    const { rows } = await pool.query<Card>(
      `INSERT INTO cards (holder, last4, pin_hash) VALUES ($1, '4242', 'x9f') RETURNING id, holder, last4, pin_hash AS "pinHash"`,
      [holder],
    );
    return new Card(rows[0]);
  }

  @Mutation(() => Voucher)
  @Idempotent()
  async issueVoucher(@Args('code') code: string): Promise<Voucher> {
    await pool.query('INSERT INTO cards (holder, last4, pin_hash) VALUES ($1, $2, $3)', [
      code,
      '0000',
      '-',
    ]);
    return new Voucher({ code, secret: 'S3CR3T-42', internalNote: 'do not show' });
  }
}

describe.each([
  ['excludeAll', { strategy: 'excludeAll' as const }],
  ['the default strategy', {}],
])('GraphQL under a global ClassSerializerInterceptor (%s)', (label, options) => {
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
      GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
      }),
    ],
    providers: [
      CardsResolver,
      {
        provide: APP_INTERCEPTOR,
        inject: [Reflector],
        useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector, options),
      },
    ],
  })
  class CardsModule {}

  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp(`gql_class_serializer_${label.length}`, {
      module: CardsModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE cards (id serial PRIMARY KEY, holder text NOT NULL, last4 text NOT NULL, pin_hash text NOT NULL)',
        );
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
  const rows = async (holder: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM cards WHERE holder = $1', [holder])).rows[0]
        .count,
    );
  const replayedAs = (first: { body: object }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  it('a selection smaller than the exposed fields: the replay is the first answer', async () => {
    const holder = `subset-${label.length}`;
    const query = `mutation { issueCard(holder: "${holder}") { id holder } }`;
    const first = await send(holder, query);
    const replay = await send(holder, query);
    expect(first.body).toEqual({ data: { issueCard: { id: expect.any(Number), holder } } });
    expect(replay.body).toEqual(replayedAs(first, 'issueCard'));
    expect(await rows(holder)).toBe(1);
  });

  it("a retry that selects a field the first call did not: the instance's own data was kept", async () => {
    const holder = `more-${label.length}`;
    await send(holder, `mutation { issueCard(holder: "${holder}") { id holder } }`);
    const retry = await send(holder, `mutation { issueCard(holder: "${holder}") { id last4 } }`);
    // Card is class-transformer's (@Exclude, @Expose): its whole own data is kept, since an
    // outer serializer's transforms may read any of it on a replay (adversary 45b, 46a, 47a).
    // The retry is answered from it, as the first call's object had it (an object of a class
    // without such metadata is refused with field_not_stored: test/graphql-side-roads).
    const body = retry.body as { data: { issueCard: { id: number; last4: string } } };
    expect(body.data.issueCard).toEqual({ id: expect.any(Number), last4: '4242' });
    expect(await rows(holder)).toBe(1);
  });

  it('a child of an entity class (not the Nest type): its transform applies on a replay too', async () => {
    if (label === 'excludeAll') return; // the entity exposes nothing under excludeAll
    const holder = `entity-${label.length}`;
    // `visibility` not selected: the transform reads it from the kept data (adversary 48a).
    const query = `mutation { openAccount(holder: "${holder}") { id owner { id email } } }`;
    const first = await send(holder, query);
    const replay = await send(holder, query);
    expect(first.body).toEqual({
      data: { openAccount: { id: expect.any(Number), owner: { id: 7, email: null } } },
    });
    expect(replay.body).toEqual(replayedAs(first, 'openAccount'));
    expect(await rows(holder)).toBe(1);
  });

  it('an entity class whose name two classes share: the replay is refused, never unmasked', async () => {
    if (label === 'excludeAll') return;
    const holder = `twin-${label.length}`;
    const query = `mutation { openAccount(holder: "${holder}", twin: true) { id owner { email } } }`;
    const first = await send(holder, query);
    const replay = await send(holder, query);
    expect(first.body).toEqual({
      data: { openAccount: { id: expect.any(Number), owner: { email: null } } },
    });
    expect(JSON.stringify(replay.body)).not.toContain('owner@example.com');
    expect((replay.body as { errors?: unknown[] }).errors).toEqual(expect.any(Array));
    expect(await rows(holder)).toBe(1);
  });

  it('@Transform() and @Exclude() on schema fields: the replay is the first answer', async () => {
    const code = `voucher-${label.length}`;
    const query = `mutation { issueVoucher(code: "${code}") { code secret internalNote } }`;
    const first = await send(code, query);
    const replay = await send(code, query);
    const expected =
      label === 'excludeAll'
        ? // Nothing of Voucher is exposed: every field is dropped, as on the first answer.
          { errors: expect.any(Array), data: null }
        : { data: { issueVoucher: { code, secret: '****42', internalNote: null } } };
    expect(first.body).toEqual(expected);
    if (label === 'excludeAll') {
      expect(replay.body).toEqual({ ...expected, extensions: expect.anything() });
    } else {
      expect(replay.body).toEqual(replayedAs(first, 'issueVoucher'));
    }
    expect(await rows(code)).toBe(1);
  });
});
