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
 * Adversary, round 47a (third break): the value is an instance of a SUBCLASS of the Nest type's
 * class (`class StaffMember extends Member`, returned for the `Member` type). class-transformer
 * reads a class's decorators with its parents', so `ClassSerializerInterceptor` applies
 * `Member`'s `@Transform()` to the first answer. But a replay names a class only for an object
 * that is exactly an instance of the Nest class (`isOfNestType`, nest-fields.ts:77-80,
 * wire-value.ts:210 and 298; `INSTANCE` unset): the replay is a bare plain object, the
 * serializer finds no class and no transform, and the email the transform masked is answered
 * IN CLEAR, even with every field selected. The only trace is a log line saying the replay is
 * a plain object (wire-value.ts:299-306), and only if the subclass has members of its own.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global):
 * `@ObjectType() class Member { id; visibility; @Transform(({ value, obj }) => obj.visibility
 * === 'private' ? null : value) email }` and `class StaffMember extends Member { get isStaff()
 * { return true; } }` (no `@ObjectType()`: a domain subclass). `createMember(ref, staff)`
 * (`@Idempotent()`) returns a `StaffMember` or a `Member`. The client selects `{ id visibility
 * email }`.
 *
 * What happens: first answer `email: null`; replay `email: "stf@example.com"`.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same returning a `Member`: the replay is the first answer. Passes.
 *
 * Severity: critical (a wrong answer replayed, which discloses data the app masked).
 */
let pool: Pool;

@ObjectType()
class Member {
  @Field(() => Int)
  id!: number;

  @Field()
  visibility!: string;

  @Field(() => String, { nullable: true })
  @Transform(({ value, obj }: { value: string; obj: Member }) =>
    obj.visibility === 'private' ? null : value,
  )
  email!: string | null;
}

class StaffMember extends Member {
  get isStaff(): boolean {
    return true;
  }
}

@Resolver()
class MembersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Member)
  @Idempotent()
  async createMember(@Args('ref') ref: string, @Args('staff') staff: boolean): Promise<Member> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    const member = staff ? new StaffMember() : new Member();
    return Object.assign(member, {
      id: rows[0].id,
      visibility: 'private',
      email: `${ref}@example.com`,
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
    MembersResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class MembersModule {}

describe('adversary 47a: a subclass instance replays without its class', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv47a_subclass_instance', {
      module: MembersModule,
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

  it('control: a Member: the replay is the first answer', async () => {
    const query = 'mutation { createMember(ref: "ctl", staff: false) { id visibility email } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body.data.createMember.email).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createMember'));
    expect(await effects('ctl')).toBe(1);
  });

  it('a StaffMember: the replay masks the email as the first answer did', async () => {
    const query = 'mutation { createMember(ref: "stf", staff: true) { id visibility email } }';
    const first = await send('stf', query);
    const replay = await send('stf', query);
    expect(first.body.data.createMember.email).toBeNull();
    // Observed: the replay answers email "stf@example.com".
    expect(replay.body.data?.createMember?.email).toBeNull();
    expect(replay.body).toEqual(replayedAs(first, 'createMember'));
    expect(await effects('stf')).toBe(1);
  });
});
