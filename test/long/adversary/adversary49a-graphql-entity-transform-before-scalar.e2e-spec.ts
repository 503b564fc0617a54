import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ClassSerializerInterceptor, Module } from '@nestjs/common';
import { APP_INTERCEPTOR, Reflector } from '@nestjs/core';
import {
  Args,
  Field,
  GraphQLModule,
  ID,
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
 * Adversary, round 49a: the resolver returns an ENTITY (class-transformer decorators of its own)
 * for a model type, and the entity's `@Transform(..., { toPlainOnly: true })` turns its BigInt
 * key (as Prisma reads a `BigInt` column) into the string the model's `ID` field answers. The
 * app's global `ClassSerializerInterceptor` applies the transform to the resolver's value
 * before GraphQL reads it, so without `@Idempotent()` the mutation answers `id: "<digits>"`.
 * Under `@Idempotent()` the answer is stored from the resolver's RAW value, before the outer
 * serializer ran: `walkValue` reads the selected `id` (lib/graphql/wire-value.ts:249-291) and
 * writes it with its scalar (`leafWire(type.serialize(value))`, wire-value.ts:191), and `ID`
 * refuses a bigint. run-field.ts:124-128 takes that for "no JSON form" and answers the
 * field's error (`failed()`, run-field.ts:257): the mutation that works without the decorator
 * can never succeed with it (every retry the same), though GraphQL itself never sees the
 * bigint. The entity's class is the one the replay names (wire-value.ts:229-237, round 48a),
 * so the library knows a serializer transforms this value, yet writes the raw one.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global):
 * `class MemberEntity { @Transform(({ value }) => value.toString(), { toPlainOnly: true })
 * id: bigint; name }`, `@ObjectType('Member') class MemberModel { @Field(() => ID) id; name }`.
 * `createMember(ref)` (`@Idempotent()`, `@Mutation(() => MemberModel)`) inserts a row and
 * returns the entity.
 *
 * What happens: the first answer is an error ("ID cannot represent value: 2", code
 * INTERNAL_SERVER_ERROR, data null) in place of the app's answer.
 *
 * Expected: the answer the app gives without the decorator (`id` as its digits), the row
 * written once, and the replay that answer plus the replay marker.
 *
 * Control: the same mutation without `@Idempotent()` (`createPlain`): answers the digits.
 * Passes.
 *
 * Severity: medium (an error answered for a mutation that succeeds without the decorator,
 * on an ordinary entity/model app; nothing disclosed, nothing run twice).
 */
let pool: Pool;

class MemberEntity {
  @Transform(({ value }: { value: bigint }) => value.toString(), { toPlainOnly: true })
  id!: bigint;

  name!: string;
}

@ObjectType('Member')
class MemberModel {
  @Field(() => ID)
  id!: string;

  @Field()
  name!: string;
}

@Resolver()
class MembersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async insert(ref: string): Promise<MemberEntity> {
    const { rows } = await pool.query<{ id: string }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return Object.assign(new MemberEntity(), { id: BigInt(rows[0].id), name: ref });
  }

  @Mutation(() => MemberModel)
  @Idempotent()
  createMember(@Args('ref') ref: string): Promise<MemberEntity> {
    return this.insert(ref);
  }

  @Mutation(() => MemberModel)
  createPlain(@Args('ref') ref: string): Promise<MemberEntity> {
    return this.insert(ref);
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

describe('adversary 49a: an entity transform to its ID scalar, refused from the raw value', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv49a_entity_bigint', {
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

  it('control: without @Idempotent() the entity answers its id as digits', async () => {
    const res = await send('ctl', 'mutation { createPlain(ref: "ctl") { id name } }');
    expect(res.body.errors).toBeUndefined();
    expect(res.body.data.createPlain.id).toMatch(/^[0-9]+$/);
    expect(await effects('ctl')).toBe(1);
  });

  // Stated, not fixed (round 49a, medium): the library writes a field's value through its
  // scalar before any serializer outside `@Idempotent()` transformed it, so a value only the
  // serializer makes fit (a bigint id turned to a string by `@Transform()` for the ID scalar)
  // fails the field at the first answer, loudly, where the app alone answers it. Nothing is
  // disclosed or run twice. graphql.md says to return the field's wire form (the string) from
  // the resolver, or map the entity to the model there, on such routes.
  it.skip('under @Idempotent(): the same answer, stored, and replayed', async () => {
    const query = 'mutation { createMember(ref: "ent") { id name } }';
    const first = await send('ent', query);
    // Observed: errors ["ID cannot represent value: ..."], data null.
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data?.createMember?.id).toMatch(/^[0-9]+$/);
    const replay = await send('ent', query);
    expect(replay.body).toEqual(replayedAs(first, 'createMember'));
    expect(await effects('ent')).toBe(1);
  });
});
