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
import { type DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Adversary, round 12: a mutation whose list is an iterator (a `Map`'s `values()`, a
 * generator), which GraphQL takes for a list, answers an empty list the first time and the
 * full list on every replay.
 *
 * What the app does: `addTags(tags)` inserts the tags, dedupes the rows by tag in a `Map`, and
 * returns `byTag.values()` for a `[Tag!]!` field (graphql-js accepts any iterable for a list).
 * What happens: to store the answer, `outputWire` reads the list with `Array.from()`, which
 * consumes the iterator; the first answer is then the resolver's own value
 * (`stored === answer ? outcome.value : …` in run-field.ts), the same iterator, now empty:
 * GraphQL writes `[]`. The stored answer holds the tags, so each replay answers them.
 * What was expected: the first answer as the plain mutation's (the tags), and every replay the
 * same.
 * Why it matters: "every answer after the first final one identical"; the first answer says
 * nothing was added while the rows were committed.
 */
@ObjectType()
class Tag {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;
}

@Resolver(() => Tag)
class TagsResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async add(tags: string[]): Promise<Iterable<Tag>> {
    const rows = (await this.dataSource.query(
      'INSERT INTO tags (name) SELECT unnest($1::text[]) RETURNING id, name',
      [tags],
    )) as Tag[];
    const byName = new Map<string, Tag>();
    for (const row of rows) if (!byName.has(row.name)) byName.set(row.name, row);
    return byName.values();
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => [Tag])
  @Idempotent()
  addTags(@Args('tags', { type: () => [String] }) tags: string[]) {
    return this.add(tags);
  }

  @Mutation(() => [Tag])
  addTagsPlain(@Args('tags', { type: () => [String] }) tags: string[]) {
    return this.add(tags);
  }
}

describe('adversary 12: GraphQL, a list answered as an iterator', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv12_graphql_iterator');
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
      providers: [TagsResolver],
    })
    class TagsAppModule {}
    app = await bootstrapTestApp(TagsAppModule, 'express');
    await app
      .get<DataSource>((await import('@nestjs/typeorm')).getDataSourceToken())
      .query('CREATE TABLE tags (id serial PRIMARY KEY, name text NOT NULL)');
  });

  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  const mutate = (field: string, key?: string) => {
    const call = request(app.getHttpServer())
      .post('/graphql')
      .send({ query: `mutation { ${field}(tags: ["red", "blue", "red"]) { name } }` });
    return key ? call.set('Idempotency-Key', key) : call;
  };

  it('answers the tags the first time and on every replay', async () => {
    const plain = await mutate('addTagsPlain');
    expect(plain.body).toEqual({ data: { addTagsPlain: [{ name: 'red' }, { name: 'blue' }] } });

    const first = await mutate('addTags', 'tags-1');
    const replay = await mutate('addTags', 'tags-1');
    // Observed: the first answer { addTags: [] }; the replay the two tags.
    expect({ first: first.body.data, replay: replay.body.data }).toEqual({
      first: { addTags: [{ name: 'red' }, { name: 'blue' }] },
      replay: { addTags: [{ name: 'red' }, { name: 'blue' }] },
    });
  });
});
