import { jest } from '@jest/globals';
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
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 50a: a field the value holds as an OWN property that is NOT ENUMERABLE
 * (`Object.defineProperty(member, 'email', { value, enumerable: false })`, the JavaScript way
 * to keep a member out of every copy and `JSON.stringify`, as some ORMs mark their internals).
 * The app's global `ClassSerializerInterceptor` (Nest's recipe) copies own enumerable keys only
 * (`instanceToPlain`: `Object.keys`), so GraphQL's FIRST answer is `email: null`.
 *
 * Round 49a's fix replays a field the value gave through its class (a prototype getter) as
 * non-enumerable data (`FROM_CLASS`), but the test is `property in source &&
 * !hasOwnProperty(source, property)` (lib/graphql/wire-value.ts:282): an own property is never
 * "from the class", whatever its enumerability. It is read (GraphQL's default resolver would
 * read it), stored, and `fromWire` defines it as an ENUMERABLE own property (`own()`,
 * wire-value.ts:573, :654-661). On a replay the serializer copies it, and the replay answers the
 * email IN CLEAR.
 *
 * The app (both drivers: Apollo on Express, Mercurius on Fastify; the pool seam;
 * `ClassSerializerInterceptor` global): `@ObjectType() class Member { @Field(() => Int) id;
 * @Field(() => String, { nullable: true }) email }`. `createMember(ref)` (`@Idempotent()`)
 * inserts a row and returns a `Member` whose `email` is defined not enumerable. The client
 * selects `{ id email }`.
 *
 * What happens: first answer `email: null`; replay `email: "key@example.com"`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same member given by a getter of the class (`get email()`, round 49a's case):
 * the replay is the first answer. Passes.
 *
 * Severity: critical (masked data shown: a member the first answer left out is given on every
 * replay).
 */
let pool: Pool;

@ObjectType()
class Member {
  @Field(() => Int)
  id!: number;

  @Field(() => String, { nullable: true })
  email!: string | null;
}

@ObjectType()
class GetterMember {
  @Field(() => Int)
  id!: number;

  secret!: string;

  @Field(() => String, { nullable: true })
  get email(): string {
    return this.secret;
  }
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

  @Mutation(() => Member)
  @Idempotent()
  async createMember(@Args('ref') ref: string): Promise<Member> {
    const member = Object.assign(new Member(), { id: await this.insert(ref) });
    Object.defineProperty(member, 'email', {
      value: `${ref}@example.com`,
      enumerable: false,
      writable: true,
    });
    return member;
  }

  @Mutation(() => GetterMember)
  @Idempotent()
  async createGetterMember(@Args('ref') ref: string): Promise<GetterMember> {
    const member = Object.assign(new GetterMember(), { id: await this.insert(ref) });
    // Not enumerable either, so that the serializer leaves it out as it leaves the getter out.
    Object.defineProperty(member, 'secret', { value: `${ref}@example.com`, enumerable: false });
    return member;
  }
}

function membersModule(driver: 'apollo' | 'mercurius') {
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
      driver === 'apollo'
        ? GraphQLModule.forRoot<ApolloDriverConfig>({
            driver: ApolloDriver,
            autoSchemaFile: true,
            graphiql: false,
            includeStacktraceInErrorResponses: false,
          })
        : GraphQLModule.forRoot<MercuriusDriverConfig>({
            driver: MercuriusDriver,
            autoSchemaFile: true,
            graphiql: false,
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
  return MembersModule;
}

describe.each(['apollo', 'mercurius'] as const)(
  'adversary 50a: a non-enumerable own field, left out at first, shown on the replay (%s)',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      fixture = await startPoolApp(`adv50a_non_enumerable_${driver}`, {
        module: membersModule(driver),
        max: 4,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
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

    it('control: the same member given by a getter: the replay is the first answer', async () => {
      const query = 'mutation { createGetterMember(ref: "get") { id email } }';
      const first = await send('get', query);
      const replay = await send('get', query);
      expect(first.body.data.createGetterMember.email).toBeNull();
      expect(replay.body).toEqual(replayedAs(first, 'createGetterMember'));
      expect(await effects('get')).toBe(1);
    });

    it('the replay leaves the non-enumerable email out, as the first answer did', async () => {
      const query = 'mutation { createMember(ref: "key") { id email } }';
      const first = await send('key', query);
      const replay = await send('key', query);
      expect(first.body.errors).toBeUndefined();
      expect(first.body.data.createMember.email).toBeNull();
      // Observed: the replay answers email "key@example.com".
      expect(replay.body.data?.createMember?.email).toBeNull();
      expect(replay.body).toEqual(replayedAs(first, 'createMember'));
      expect(await effects('key')).toBe(1);
    });
  },
);
