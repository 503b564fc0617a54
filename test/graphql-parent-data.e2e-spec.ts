import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

/**
 * The own data a mutation's value keeps for a `@ResolveField()` a retry may select (its type
 * has one: lib/graphql/parent-keeping.ts) is left out of a stored answer it would take past
 * `maxResponseBytes` (lib/graphql/parent-data-within.ts): a large column no client selects
 * never rolls the mutation's work back, as it did not before that data was kept (adversary
 * 12), and a small one is kept for the retry's resolver.
 */
let pool: Pool;

@ObjectType()
class Document {
  @Field(() => Int)
  id!: number;

  @Field()
  title!: string;

  @Field()
  body!: string;
}

@Resolver(() => Document)
class DocumentFields {
  @ResolveField(() => Int)
  words(@Parent() document: Document): number {
    return document.body.split(' ').filter(Boolean).length;
  }
}

@Resolver(() => Document)
class DocumentsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Document)
  @Idempotent()
  async createDocument(): Promise<Document> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO documents DEFAULT VALUES RETURNING id',
    );
    const long = rows[0].id % 2 === 1;
    return { id: rows[0].id, title: 'draft', body: 'lorem ipsum '.repeat(long ? 100_000 : 2) };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [DocumentsResolver, DocumentFields],
})
class DocumentsModule {}

describe('GraphQL: the own data kept for a @ResolveField() a retry may select', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('gql_parent_data', {
      module: DocumentsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE documents (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  it('a large column no client selects: left out, the answer stored, the work kept', async () => {
    const first = await post('parent-data-large', 'mutation { createDocument { id title } }');
    expect(first.body).toEqual({ data: { createDocument: { id: 1, title: 'draft' } } });
    const again = await post('parent-data-large', 'mutation { createDocument { id title } }');
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createDocument'] } },
    });
    const { rows } = await pool.query<{ count: string }>('SELECT count(*) FROM documents');
    expect(rows).toEqual([{ count: '1' }]);
  });

  it('a small one: kept, a retry that selects the resolver reads it', async () => {
    const first = await post('parent-data-small', 'mutation { createDocument { id title } }');
    expect(first.body).toEqual({ data: { createDocument: { id: 2, title: 'draft' } } });
    const again = await post('parent-data-small', 'mutation { createDocument { id words } }');
    expect(again.body).toEqual({
      data: { createDocument: { id: 2, words: 4 } },
      extensions: { idempotency: { replayed: ['createDocument'] } },
    });
  });
});
