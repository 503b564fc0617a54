import { Module } from '@nestjs/common';
import { Args, Field, Int, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import {
  Column,
  type DataSource,
  Entity,
  JoinColumn,
  ManyToOne,
  OneToMany,
  PrimaryGeneratedColumn,
} from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';

/**
 * Adversary, round 12: a GraphQL mutation that returns a TypeORM entity with lazy relations
 * both ways (the code-first recipe: `Book.author: Promise<Author>`, `Author.books:
 * Promise<Book[]>`, each a `@Field()`) never answers, and its key stays held.
 *
 * What the app does: `addBook(title, authorId)` saves a book and returns it as TypeORM loads
 * it (`findOneByOrFail`); the client selects `{ id title }`. GraphQL resolves only the
 * selection, so without `@Idempotent()` (the `addBookPlain` control) it answers at once with
 * no relation loaded.
 * What happens: to store the answer, `outputWire` (lib/graphql/wire-value.ts) walks the value
 * along the field's *type*, every field of it, not the selection, and awaits each lazy
 * relation ("as GraphQL awaits it", but GraphQL awaits only the selected ones): `Book.author`
 * loads the author, `Author.books` its books, each `Book.author` a new author instance, and so
 * on without end, a query at each step, in the request's transaction. The request never
 * answers; the heartbeat keeps the lease, so each retry meets 409 key_in_progress, for as long
 * as the process lives (and its memory grows).
 * What was expected: the plain mutation's answer (200, the book), stored and replayed; the
 * retry gets it.
 * Why it matters: lazy relations exposed as fields are ordinary TypeORM + GraphQL code, and
 * the docs name them as handled; "no hang that holds a key".
 *
 * The app runs in a child process (this file compiled, `npx tsc -p tsconfig.json`, run by node
 * with ADV12_LAZY_WORKER set), so that the endless walk is killed with it.
 */
@ObjectType()
@Entity({ name: 'authors', synchronize: false })
class Author {
  @Field(() => Int)
  @PrimaryGeneratedColumn()
  id!: number;

  @Field()
  @Column({ type: 'text' })
  name!: string;

  @Field(() => [Book])
  @OneToMany(() => Book, (book) => book.author, { lazy: true })
  books!: Promise<Book[]>;
}

@ObjectType()
@Entity({ name: 'books', synchronize: false })
class Book {
  @Field(() => Int)
  @PrimaryGeneratedColumn()
  id!: number;

  @Field()
  @Column({ type: 'text' })
  title!: string;

  @Column({ type: 'int', name: 'author_id' })
  authorId!: number;

  @Field(() => Author)
  @ManyToOne(() => Author, (author) => author.books, { lazy: true })
  @JoinColumn({ name: 'author_id' })
  author!: Promise<Author>;
}

@Resolver(() => Book)
class BooksResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async add(title: string, authorId: number): Promise<Book> {
    const books = this.dataSource.getRepository(Book);
    const { id } = await books.save(books.create({ title, authorId }));
    return books.findOneByOrFail({ id });
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Book)
  @Idempotent()
  addBook(
    @Args('title') title: string,
    @Args('authorId', { type: () => Int }) authorId: number,
  ): Promise<Book> {
    return this.add(title, authorId);
  }

  @Mutation(() => Book)
  addBookPlain(
    @Args('title') title: string,
    @Args('authorId', { type: () => Int }) authorId: number,
  ): Promise<Book> {
    return this.add(title, authorId);
  }
}

async function runWorker(): Promise<void> {
  const { ApolloDriver } = await import('@nestjs/apollo');
  const { GraphQLModule } = await import('@nestjs/graphql');
  const { bootstrapTestApp } = await import('../../support/bootstrap.js');
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: process.env.DATABASE_URL,
        entities: [Author, Book],
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
      }),
      IdempotencyModule.forRoot({ globalKeys: true }),
      GraphQLModule.forRoot({ driver: ApolloDriver, autoSchemaFile: true, graphiql: false }),
    ],
    providers: [BooksResolver],
  })
  class LazyAppModule {}
  const app = await bootstrapTestApp(LazyAppModule, 'express');
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  console.log(`listening on ${address.port}`);
}

if (process.env.ADV12_LAZY_WORKER === '1') {
  await runWorker();
} else {
  const { default: request } = await import('supertest');
  const { Client } = await import('pg');
  const { createTestDatabase } = await import('../../support/database.js');
  const { startWorker } = await import('../../support/worker-process.js');
  type Worker = Awaited<ReturnType<typeof startWorker>>;

  describe('adversary 12: GraphQL, a TypeORM entity with lazy relations both ways', () => {
    let database: Awaited<ReturnType<typeof createTestDatabase>>;
    let worker: Worker | undefined;

    beforeAll(async () => {
      database = await createTestDatabase('adv12_graphql_lazy');
      const admin = new Client({ connectionString: database.url });
      await admin.connect();
      await admin.query('CREATE TABLE authors (id serial PRIMARY KEY, name text NOT NULL)');
      await admin.query(
        'CREATE TABLE books (id serial PRIMARY KEY, title text NOT NULL, ' +
          'author_id int NOT NULL REFERENCES authors (id))',
      );
      await admin.query(`INSERT INTO authors (name) VALUES ('Ursula')`);
      await admin.end();
      worker = await startWorker(
        'test/long/adversary/adversary12-graphql-lazy-relations.e2e-spec.js',
        { ADV12_LAZY_WORKER: '1', DATABASE_URL: database.url },
      );
    }, 60_000);

    afterAll(async () => {
      await worker?.kill();
      await database?.drop();
    });

    const mutate = (field: string, key?: string) => {
      const call = request(worker!.url)
        .post('/graphql')
        .timeout(4_000)
        .send({ query: `mutation { ${field}(title: "Earthsea", authorId: 1) { id title } }` });
      return (key ? call.set('Idempotency-Key', key) : call).then(
        (response) => ({ status: response.status, body: response.body as unknown }),
        (error: Error) => ({ status: 0, body: error.message }),
      );
    };

    it('answers, stores and replays it as the plain mutation answers it', async () => {
      const plain = await mutate('addBookPlain');
      expect(plain).toEqual({
        status: 200,
        body: { data: { addBookPlain: { id: 1, title: 'Earthsea' } } },
      });
      const first = await mutate('addBook', 'book-1');
      const retry = await mutate('addBook', 'book-1');
      // Observed: no answer (the client's 4 s timeout), the walk still loading relations; the
      // retry: key_in_progress, the key held by the endless walk.
      const answer = { status: 200, body: { data: { addBook: { id: 2, title: 'Earthsea' } } } };
      expect({ first, retry }).toEqual({
        first: answer,
        retry: { status: 200, body: { ...answer.body, extensions: expect.anything() } },
      });
    }, 30_000);
  });
}
