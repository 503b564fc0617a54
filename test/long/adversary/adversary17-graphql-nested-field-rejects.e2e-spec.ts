import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type INestApplication, Module } from '@nestjs/common';
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
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Adversary, round 17: an error in a nullable nested field of a mutation's answer (GraphQL's
 * partial data) undoes the mutation and is stored as its answer.
 *
 * What the app does (Apollo on Express, TypeORM): `createProfile(name)` inserts a profile and
 * returns it with `avatarUrl` a Promise of a signed URL (`avatarUrl: signer.sign(key)`, a
 * field GraphQL awaits; `@Field({ nullable: true })`). The signing service is down, so that
 * Promise rejects. Without `@Idempotent()` (the control): GraphQL's partial answer, `{ data:
 * { createProfile: { id, name, avatarUrl: null } }, errors: [{ path: ['createProfile',
 * 'avatarUrl'], … }] }`, and the profile is kept: a nullable field's error nulls that field
 * only (GraphQL spec, "Handling Field Errors"), the mutation did its work.
 *
 * What happens: to store the answer the library awaits each selected Promise
 * (lib/graphql/wire-value.ts, `walkValue`), and the rejection escapes the walk; `runField`
 * takes it as "a value that cannot be stored": the insert rolls back, and the signer's error
 * is stored as the whole mutation's answer: `{ data: null, errors: [{ path: ['createProfile']
 * … }] }`, replayed to every retry. The profile never exists, and the key can never create it
 * (the signer being back does not help: the error is stored).
 *
 * What should happen (docs/guides/graphql.md): "A selected field whose value is a Promise … is
 * awaited and its value stored, as GraphQL awaits it", "the first call … runs the resolver,
 * and its database work commits with its answer; a retry gets that answer again". The
 * resolver succeeded; its answer is GraphQL's partial one. Expected: the profile kept once,
 * the first answer as the control's (the field null, its error at its path), and a retry that
 * replays the profile (its `avatarUrl` null or its error, not the whole mutation failed).
 *
 * Why it matters: a passing failure of a side service turns into a stored, permanent failure
 * of the mutation, and a succeeded write is rolled back. Medium-low: a nested nullable field
 * that awaits another service (a signed URL, a price quote) is common; most apps resolve such
 * fields with a `@ResolveField()` instead, which runs after the walk and is not affected.
 */
@ObjectType()
class Profile {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;

  @Field(() => String, { nullable: true })
  avatarUrl!: Promise<string | null>;
}

/** The signing service, down. */
function sign(key: string): Promise<string> {
  return Promise.reject(new Error(`signer unavailable for ${key}`));
}

@Resolver(() => Profile)
class ProfilesResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async create(name: string): Promise<Profile> {
    const rows = (await this.dataSource.query(
      'INSERT INTO profiles (name) VALUES ($1) RETURNING id',
      [name],
    )) as { id: number }[];
    const avatarUrl = sign(`avatars/${rows[0].id}`);
    // GraphQL awaits it when it answers the field: no unhandled rejection before.
    avatarUrl.catch(() => undefined);
    return { id: rows[0].id, name, avatarUrl };
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Profile)
  createProfilePlain(@Args('name') name: string): Promise<Profile> {
    return this.create(name);
  }

  @Mutation(() => Profile)
  @Idempotent()
  createProfile(@Args('name') name: string): Promise<Profile> {
    return this.create(name);
  }
}

describe('adversary 17: GraphQL, an error in a nullable nested field of the answer', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv17_gql_nested_rejects');
    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: true,
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          graphiql: false,
        }),
      ],
      providers: [ProfilesResolver],
    })
    class ProfilesModule {}
    app = await bootstrapTestApp(ProfilesModule, 'express');
    await app
      .get(DataSource)
      .query('CREATE TABLE profiles (id serial PRIMARY KEY, name text NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  const mutate = (field: string, name: string, key?: string) => {
    const call = request(app.getHttpServer())
      .post('/graphql')
      .send({ query: `mutation { ${field}(name: "${name}") { id name avatarUrl } }` });
    return key ? call.set('Idempotency-Key', key) : call;
  };

  const kept = async (name: string) =>
    (
      (await app
        .get(DataSource)
        .query('SELECT 1 FROM profiles WHERE name = $1', [name])) as unknown[]
    ).length;

  const shape = (body: unknown, field: string) => {
    const { data, errors } = body as {
      data: Record<string, unknown> | null;
      errors?: { path?: unknown[] }[];
    };
    return { data: data?.[field] ?? null, errorPaths: (errors ?? []).map((error) => error.path) };
  };

  it('without the library: partial data, the field null, the profile kept (control)', async () => {
    const answer = await mutate('createProfilePlain', 'ada');
    expect({ ...shape(answer.body, 'createProfilePlain'), kept: await kept('ada') }).toEqual({
      data: { id: 1, name: 'ada', avatarUrl: null },
      errorPaths: [['createProfilePlain', 'avatarUrl']],
      kept: 1,
    });
  });

  it('under @Idempotent(): the same partial answer, the profile kept once, replayed', async () => {
    const first = await mutate('createProfile', 'grace', 'profile-1');
    const retry = await mutate('createProfile', 'grace', 'profile-1');
    // Observed: first and retry { data: null, errorPaths: [['createProfile']] } (the signer's
    // error stored as the mutation's answer), kept: 0 (the insert rolled back).
    expect({
      first: shape(first.body, 'createProfile'),
      retry: shape(retry.body, 'createProfile').data,
      kept: await kept('grace'),
    }).toEqual({
      first: {
        data: { id: 2, name: 'grace', avatarUrl: null },
        errorPaths: [['createProfile', 'avatarUrl']],
      },
      retry: { id: 2, name: 'grace', avatarUrl: null },
      kept: 1,
    });
  });
});
