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
import { GraphQLScalarType } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 52a: round 51a names the class of an instance held by a JSON scalar's value
 * again on a replay (LEAF_CLASS: lib/graphql/class-tree.ts `namedByTree`, a plain object whose
 * `constructor` is the class), but only its own data is stored: the class's GETTERS are not
 * read at the first answer (round 50a's GOTTEN, `classGetters`, wire-value.ts:130-155, runs
 * only for objects of a GraphQL object type, wire-value.ts:435). A `@Transform()` of that class
 * that reads one of its getters (`obj.hidePhone`, a bit of a flags column) reads `undefined` on
 * the replay and does not mask.
 *
 * The app (Apollo on Express, the pool seam, Nest's global `ClassSerializerInterceptor`): a
 * settings class kept in a JSON column, `class ContactPrefs { flags; @Transform(({ value, obj })
 * => (obj.hidePhone ? null : value)) phone; get hidePhone() { return (this.flags & 1) === 1 } }`,
 * answered through a JSON scalar (`@Field(() => GraphQLJSON) prefs: ContactPrefs` on
 * `@ObjectType() Contact`). `createContact(ref)` (`@Idempotent()`) inserts a row and returns the
 * contact with `flags: 1` (phone hidden).
 *
 * What happens: first answer `prefs: { flags: 1, phone: null }`; every replay `prefs: { flags:
 * 1, phone: "+33 6 12 34 56 78" }`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Controls: (1) without `@Idempotent()` the phone is masked; (2) the same masking on the
 * object type itself (`Card` with its own getter, round 50a's case) replays masked. Both pass.
 *
 * Severity: critical (masked data shown).
 */
let pool: Pool;

const GraphQLJSON = new GraphQLScalarType({
  name: 'JSON',
  serialize: (value) => value,
  parseValue: (value) => value,
});

const PHONE = '+33 6 12 34 56 78';

class ContactPrefs {
  flags!: number;

  @Transform(({ value, obj }) => ((obj as ContactPrefs).hidePhone ? null : value))
  phone!: string;

  get hidePhone(): boolean {
    return (this.flags & 1) === 1;
  }
}

@ObjectType()
class Contact {
  @Field(() => Int)
  id!: number;

  @Field(() => GraphQLJSON)
  prefs!: ContactPrefs;
}

@ObjectType()
class Card {
  @Field(() => Int)
  id!: number;

  flags!: number;

  @Field(() => String, { nullable: true })
  @Transform(({ value, obj }) => ((obj as Card).hidePhone ? null : value))
  phone!: string;

  get hidePhone(): boolean {
    return (this.flags & 1) === 1;
  }
}

const prefs = () => Object.assign(new ContactPrefs(), { flags: 1, phone: PHONE });

@Resolver()
class ContactsResolver {
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

  @Mutation(() => Contact)
  @Idempotent()
  async createContact(@Args('ref') ref: string): Promise<Contact> {
    return Object.assign(new Contact(), { id: await this.insert(ref), prefs: prefs() });
  }

  @Mutation(() => Contact)
  async createContactPlain(@Args('ref') ref: string): Promise<Contact> {
    return Object.assign(new Contact(), { id: await this.insert(ref), prefs: prefs() });
  }

  @Mutation(() => Card)
  @Idempotent()
  async createCard(@Args('ref') ref: string): Promise<Card> {
    return Object.assign(new Card(), { id: await this.insert(ref), flags: 1, phone: PHONE });
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
    ContactsResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class ContactsModule {}

describe('adversary 52a: a JSON scalar holding a class whose @Transform() reads its getter', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv52a_json_scalar_class_getter', {
      module: ContactsModule,
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

  it('control: without @Idempotent(), the phone is masked', async () => {
    const first = await send('p', 'mutation { createContactPlain(ref: "p") { id prefs } }');
    expect(first.body.data.createContactPlain.prefs).toEqual({ flags: 1, phone: null });
  });

  it('control: the getter on the object type itself: the replay is the first answer', async () => {
    const query = 'mutation { createCard(ref: "card") { id phone } }';
    const first = await send('card', query);
    const replay = await send('card', query);
    expect(first.body.data.createCard.phone).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createCard'));
    expect(await effects('card')).toBe(1);
  });

  it('the class in a JSON scalar: the replay masks the phone, as the first answer did', async () => {
    const query = 'mutation { createContact(ref: "json") { id prefs } }';
    const first = await send('json', query);
    const replay = await send('json', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createContact.prefs).toEqual({ flags: 1, phone: null });
    // Observed: prefs { flags: 1, phone: "+33 6 12 34 56 78" }.
    expect(replay.body.data?.createContact?.prefs).toEqual({ flags: 1, phone: null });
    expect(replay.body).toEqual(replayedAs(first, 'createContact'));
    expect(await effects('json')).toBe(1);
  });
});
