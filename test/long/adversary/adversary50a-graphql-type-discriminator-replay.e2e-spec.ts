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
import { Expose, plainToInstance, Type } from 'class-transformer';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 50a: an entity with a polymorphic member typed by class-transformer's
 * `@Type()` with a DISCRIMINATOR (class-transformer's documented recipe for a member whose class
 * varies: `@Type(() => PetEntity, { discriminator: { property: 'kind', subTypes: [{ value:
 * DogEntity, name: 'dog' }, { value: CatEntity, name: 'cat' }] } })`), the entity built with
 * `plainToInstance` (which makes the pet a `DogEntity` by its `kind`), returned for a model type
 * (the entity/model split). The app's global `ClassSerializerInterceptor` writes the
 * discriminator back from the pet's class (class-transformer TransformOperationExecutor,
 * CLASS_TO_PLAIN: `subTypes.find((subType) => subType.value === subValue.constructor).name`):
 * the FIRST answer is `pet: { name: "Rex", kind: "dog" }`.
 *
 * The replay's owner names `OwnerEntity` (round 48a), so the serializer reads its `@Type()`
 * again; but the replay's pet names no class: it is an instance of `DogEntity`, a subclass with
 * no class-transformer metadata of its own (the discriminator lives on the OWNER's property),
 * so `transformedClassOf` finds none in its chain (lib/graphql/class-transforms.ts:49-70), it is
 * no instance of the Nest type's class (`isOfNestType`), and `INSTANCE` is not stored
 * (lib/graphql/wire-value.ts:234-244, :337-347). The replay's pet is a bare `{}` (constructor
 * `Object`): `subTypes.find(...)` finds no subtype, and `.name` of undefined throws inside the
 * serializer: "Cannot read properties of undefined (reading 'name')", and the mutation answers
 * `data: null` on every retry.
 *
 * The app (Apollo on Express, the pool seam, `ClassSerializerInterceptor` global):
 * `class PetEntity { name }`, `class DogEntity extends PetEntity {}`, `class CatEntity extends
 * PetEntity {}`, `class OwnerEntity { id; @Type(discriminator as above) pet }`;
 * `@ObjectType('Pet') PetModel { name; kind }`, `@ObjectType('Owner') OwnerModel { id; pet }`.
 * `createOwner(ref)` (`@Idempotent()`, `@Mutation(() => OwnerModel)`) inserts a row and returns
 * `plainToInstance(OwnerEntity, { id, pet: { kind: 'dog', name: 'Rex' } })`. The client selects
 * `{ id pet { name kind } }`.
 *
 * What happens: first answer `{ id, pet: { name: "Rex", kind: "dog" } }`; replay `data: null`
 * with the TypeError above.
 *
 * Expected: the replay is the first answer, plus the replay marker.
 *
 * Control: the same with subclasses that carry a class-transformer decorator of their own
 * (`@Expose() name` on `BirdEntity`): the replay names the subclass and the serializer finds it.
 * Passes.
 *
 * Severity: critical (two final answers for one key: the data at first, an error on every
 * replay).
 */
let pool: Pool;

class PetEntity {
  name!: string;
}
class DogEntity extends PetEntity {}
class CatEntity extends PetEntity {}

class OwnerEntity {
  id!: number;

  @Type(() => PetEntity, {
    discriminator: {
      property: 'kind',
      subTypes: [
        { value: DogEntity, name: 'dog' },
        { value: CatEntity, name: 'cat' },
      ],
    },
  })
  pet!: PetEntity;
}

class BirdEntity {
  @Expose()
  name!: string;
}
class ParrotEntity extends BirdEntity {
  @Expose()
  declare name: string;
}
class OwlEntity extends BirdEntity {
  @Expose()
  declare name: string;
}

class BirderEntity {
  id!: number;

  @Type(() => BirdEntity, {
    discriminator: {
      property: 'kind',
      subTypes: [
        { value: ParrotEntity, name: 'parrot' },
        { value: OwlEntity, name: 'owl' },
      ],
    },
  })
  pet!: BirdEntity;
}

@ObjectType('Pet')
class PetModel {
  @Field()
  name!: string;

  @Field()
  kind!: string;
}

@ObjectType('Owner')
class OwnerModel {
  @Field(() => Int)
  id!: number;

  @Field(() => PetModel)
  pet!: PetModel;
}

@Resolver()
class OwnersResolver {
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

  @Mutation(() => OwnerModel)
  @Idempotent()
  async createOwner(@Args('ref') ref: string): Promise<OwnerEntity> {
    const id = await this.insert(ref);
    return plainToInstance(OwnerEntity, { id, pet: { kind: 'dog', name: 'Rex' } });
  }

  @Mutation(() => OwnerModel)
  @Idempotent()
  async createBirder(@Args('ref') ref: string): Promise<BirderEntity> {
    const id = await this.insert(ref);
    return plainToInstance(BirderEntity, { id, pet: { kind: 'owl', name: 'Hoot' } });
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
    OwnersResolver,
    {
      provide: APP_INTERCEPTOR,
      inject: [Reflector],
      useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    },
  ],
})
class OwnersModule {}

describe('adversary 50a: a @Type() discriminator whose subclasses have no metadata of their own', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv50a_type_discriminator', {
      module: OwnersModule,
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

  it('control: subclasses with a decorator of their own: the replay is the first answer', async () => {
    const query = 'mutation { createBirder(ref: "owl") { id pet { name kind } } }';
    const first = await send('owl', query);
    const replay = await send('owl', query);
    expect(first.body.data.createBirder.pet).toEqual({ name: 'Hoot', kind: 'owl' });
    expect(replay.body).toEqual(replayedAs(first, 'createBirder'));
    expect(await effects('owl')).toBe(1);
  });

  it('subclasses without metadata: the replay is the first answer', async () => {
    const query = 'mutation { createOwner(ref: "dog") { id pet { name kind } } }';
    const first = await send('dog', query);
    const replay = await send('dog', query);
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createOwner.pet).toEqual({ name: 'Rex', kind: 'dog' });
    // Observed: data null, "Cannot read properties of undefined (reading 'name')".
    expect(replay.body.errors).toBeUndefined();
    expect(replay.body).toEqual(replayedAs(first, 'createOwner'));
    expect(await effects('dog')).toBe(1);
  });
});
