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
 * Adversary, round 47a: round 46's fix keeps ALL the unselected own data of an instance whose
 * class has a `@Transform()` (lib/graphql/wire-value.ts:211-216, class-transforms.ts), but a
 * transform reads whatever `obj` reaches, not only its siblings: `obj.owner.hidden`. The
 * nested `Owner` is selected (walked on its own, wire-value.ts:267-268), and its class has no
 * transform, so its unselected `hidden` is not kept. On a replay the parent's transform reads
 * `obj.owner.hidden` undefined and answers the masked `contact` IN CLEAR.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global as Nest's
 * recipe says): `@ObjectType() class Owner { id; hidden }` (no transform), `@ObjectType()
 * class Listing { id; owner: Owner; @Transform(({ value, obj }) => obj.owner.hidden ? null :
 * value) contact }`. `createListing(ref)` (`@Idempotent()`) inserts a row and returns a
 * `Listing` instance whose owner is a hidden `Owner` instance. The client selects `{ id contact
 * owner { id } }`.
 *
 * What happens: first answer `contact: null` (the serializer ran on the resolver's instances);
 * the replay's `owner` is `{ id }` only (wire-value.ts:211-216 keeps nothing of an Owner, whose
 * class has no transform), so `obj.owner.hidden` is undefined and the replay answers the
 * contact.
 *
 * Expected: the replay is the first answer (contact null), plus the replay marker.
 *
 * Control: the same with `owner { id hidden }` selected: the replay is the first answer.
 * Passes.
 *
 * Severity: critical (a wrong answer replayed, which discloses data the app masked).
 */
let pool: Pool;

@ObjectType()
class Owner {
  @Field(() => Int)
  id!: number;

  @Field()
  hidden!: boolean;
}

@ObjectType()
class Listing {
  @Field(() => Int)
  id!: number;

  @Field(() => Owner)
  owner!: Owner;

  @Field(() => String, { nullable: true })
  @Transform(({ value, obj }: { value: string; obj: Listing }) =>
    obj.owner?.hidden ? null : value,
  )
  contact!: string | null;
}

@Resolver()
class ListingsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Listing)
  @Idempotent()
  async createListing(@Args('ref') ref: string): Promise<Listing> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    const owner = Object.assign(new Owner(), { id: 7, hidden: true });
    return Object.assign(new Listing(), { id: rows[0].id, owner, contact: `${ref}@example.com` });
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
    ListingsResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class ListingsModule {}

describe("adversary 47a: a @Transform() reading a nested object's unselected field", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv47a_child_unselected', {
      module: ListingsModule,
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

  it('control: owner { id hidden } selected: the replay is the first answer', async () => {
    const query = 'mutation { createListing(ref: "ctl") { id contact owner { id hidden } } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body.data.createListing.contact).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createListing'));
    expect(await effects('ctl')).toBe(1);
  });

  it('owner { id } selected: the replay masks the contact as the first answer did', async () => {
    const query = 'mutation { createListing(ref: "hid") { id contact owner { id } } }';
    const first = await send('hid', query);
    const replay = await send('hid', query);
    expect(first.body.data.createListing.contact).toBeNull();
    // Observed: the replay answers contact "hid@example.com".
    expect(replay.body.data?.createListing?.contact).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createListing'));
    expect(await effects('hid')).toBe(1);
  });
});
