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
import { Client } from 'pg';
import request from 'supertest';
import { type DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Adversary, round 12: a mutation whose answer, as the client selected it, is a few bytes is
 * refused as too large (500 response_too_large, its effects rolled back) because its type has
 * a large field the client did not select.
 *
 * What the app does: `Document { id title body }`, `body` a long text (1.2 MB: a manual, a
 * contract). `renameDocument(id, title)` updates the title and returns the document as loaded;
 * the client selects `{ id title }`, an answer of some 60 bytes (the plain mutation's).
 * What happens: the stored answer is the value walked along the field's *type*
 * (`outputWire`): every field, selected or not, so `body` too. Its 1.2 MB pass the route's
 * `maxResponseBytes` (1 MiB, "the largest response the route may give"): the rename is rolled
 * back, and 500 response_too_large is stored and replayed for ever under the key.
 * What was expected: the plain mutation's answer (the renamed document's id and title), the
 * rename kept, a retry replaying it. What counts against the limit is the answer the client
 * gets (at most what a retry may select, if the library wants to let it select more).
 * Why it matters: a GraphQL type with one large field is ordinary; every idempotent mutation
 * returning it then fails, whatever its selection, with a permanent 500.
 */
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
class DocumentsResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async rename(id: number, title: string): Promise<Document> {
    const [rows] = (await this.dataSource.query(
      'UPDATE documents SET title = $2 WHERE id = $1 RETURNING id, title, body',
      [id, title],
    )) as [Document[], number];
    return rows[0];
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Document)
  @Idempotent()
  renameDocument(
    @Args('id', { type: () => Int }) id: number,
    @Args('title') title: string,
  ): Promise<Document> {
    return this.rename(id, title);
  }

  @Mutation(() => Document)
  renameDocumentPlain(
    @Args('id', { type: () => Int }) id: number,
    @Args('title') title: string,
  ): Promise<Document> {
    return this.rename(id, title);
  }
}

describe('adversary 12: GraphQL, a large field the client did not select', () => {
  let database: TestDatabase;
  let app: INestApplication;
  let admin: Client;

  beforeAll(async () => {
    database = await createTestDatabase('adv12_graphql_unselected');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query('CREATE TABLE documents (id int PRIMARY KEY, title text, body text)');
    await admin.query(
      `INSERT INTO documents SELECT i, 'draft', repeat('lorem ipsum ', 100000) FROM generate_series(1, 2) AS i`,
    );
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
      providers: [DocumentsResolver],
    })
    class DocumentsAppModule {}
    app = await bootstrapTestApp(DocumentsAppModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await admin?.end();
    await database?.drop();
  });

  const mutate = (field: string, id: number, key?: string) => {
    const call = request(app.getHttpServer())
      .post('/graphql')
      .send({ query: `mutation { ${field}(id: ${id}, title: "final") { id title } }` });
    return key ? call.set('Idempotency-Key', key) : call;
  };

  it('stores and replays the renamed document, as the plain mutation answers it', async () => {
    const plain = await mutate('renameDocumentPlain', 1);
    expect(plain.body).toEqual({ data: { renameDocumentPlain: { id: 1, title: 'final' } } });

    const first = await mutate('renameDocument', 2, 'rename-2');
    const retry = await mutate('renameDocument', 2, 'rename-2');
    // Observed: errors [{ extensions: { code: 'response_too_large', status: 500 } }], data null,
    // on both; the title still 'draft'.
    expect(first.body).toEqual({ data: { renameDocument: { id: 2, title: 'final' } } });
    expect(retry.body.data).toEqual(first.body.data);
    const { rows } = await admin.query<{ title: string }>(
      'SELECT title FROM documents WHERE id = 2',
    );
    expect(rows).toEqual([{ title: 'final' }]);
  });
});
