import { Module } from '@nestjs/common';
import { Args, Field, Int, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { type DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';

/**
 * Adversary, round 12: a GraphQL mutation whose value links back to itself (a book whose
 * author lists its books, the book among them: a domain model's back-reference, or an ORM's
 * bidirectional relation filled in by the resolver) freezes the whole process.
 *
 * What the app does: `addBook(title)` inserts the book and returns it as its domain model has
 * it, `book.author.books` holding the book; the client selects `{ id title author { name } }`.
 * GraphQL walks only the selection, so without `@Idempotent()` (the `addBookPlain` control)
 * it answers at once.
 * What happens: to store the answer, `outputWire` (lib/graphql/wire-value.ts) walks the value
 * along the field's *type*, every field of it, not the selection, and follows
 * `Book.author -> Author.books -> Book -> ...` for ever. Each step awaits an already settled
 * promise, so it never overflows the stack: it is an endless chain of microtasks that never
 * lets the event loop run. The request gets no answer, the key stays claimed (its heartbeat
 * cannot run), and every other request of the process (a health check, the control mutation)
 * hangs too, until the process runs out of memory.
 * What was expected: the answer the plain mutation gives (200, the book), stored and replayed;
 * at worst an error (the docs say a value that cannot be stored, "a cycle under an instance of
 * a class", is stored as the field's error), never a hang.
 * Why it matters: "no hang that holds a key"; one request freezes the whole worker.
 *
 * The app runs in a child process (this file compiled, `npx tsc -p tsconfig.json`, run by node
 * with ADV12_CYCLE_WORKER set), so
 * that the hang cannot freeze jest.
 */
@ObjectType()
class Author {
  @Field()
  name!: string;

  @Field(() => [Book])
  books!: Book[];
}

@ObjectType()
class Book {
  @Field(() => Int)
  id!: number;

  @Field()
  title!: string;

  @Field(() => Author)
  author!: Author;
}

@Resolver(() => Book)
class BooksResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async add(title: string): Promise<Book> {
    const [row] = (await this.dataSource.query(
      'INSERT INTO books (title) VALUES ($1) RETURNING id',
      [title],
    )) as { id: number }[];
    const author: Author = { name: 'Ursula', books: [] };
    const book: Book = { id: row.id, title, author };
    author.books.push(book);
    return book;
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Book)
  @Idempotent()
  addBook(@Args('title') title: string): Promise<Book> {
    return this.add(title);
  }

  @Mutation(() => Book)
  addBookPlain(@Args('title') title: string): Promise<Book> {
    return this.add(title);
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
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
      }),
      IdempotencyModule.forRoot({ globalKeys: true }),
      GraphQLModule.forRoot({ driver: ApolloDriver, autoSchemaFile: true, graphiql: false }),
    ],
    providers: [BooksResolver],
  })
  class CyclicAppModule {}
  const app = await bootstrapTestApp(CyclicAppModule, 'express');
  await app.listen(0, '127.0.0.1');
  const address = app.getHttpServer().address() as { port: number };
  console.log(`listening on ${address.port}`);
}

if (process.env.ADV12_CYCLE_WORKER === '1') {
  await runWorker();
} else {
  const { default: request } = await import('supertest');
  const { Client } = await import('pg');
  const { createTestDatabase } = await import('../../support/database.js');
  const { startWorker } = await import('../../support/worker-process.js');
  type Worker = Awaited<ReturnType<typeof startWorker>>;

  describe('adversary 12: GraphQL, a mutation whose value links back to itself', () => {
    let database: Awaited<ReturnType<typeof createTestDatabase>>;
    let worker: Worker | undefined;

    beforeAll(async () => {
      database = await createTestDatabase('adv12_graphql_cycle');
      const admin = new Client({ connectionString: database.url });
      await admin.connect();
      await admin.query('CREATE TABLE books (id serial PRIMARY KEY, title text NOT NULL)');
      await admin.end();
      worker = await startWorker(
        'test/long/adversary/adversary12-graphql-cyclic-answer.e2e-spec.js',
        {
          ADV12_CYCLE_WORKER: '1',
          DATABASE_URL: database.url,
        },
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
        .send({ query: `mutation { ${field}(title: "Earthsea") { id title author { name } } }` });
      return (key ? call.set('Idempotency-Key', key) : call).then(
        (response) => ({ status: response.status, body: response.body as unknown }),
        (error: Error) => ({ status: 0, body: error.message }),
      );
    };

    it('answers, stores and replays it as the plain mutation answers it', async () => {
      const plain = await mutate('addBookPlain');
      expect(plain).toEqual({
        status: 200,
        body: { data: { addBookPlain: { id: 1, title: 'Earthsea', author: { name: 'Ursula' } } } },
      });
      const first = await mutate('addBook', 'book-1');
      // Observed: no answer (the client's 4 s timeout); the process answers nothing more.
      expect(first).toEqual({
        status: 200,
        body: { data: { addBook: { id: 2, title: 'Earthsea', author: { name: 'Ursula' } } } },
      });
      const replay = await mutate('addBook', 'book-1');
      expect(replay.status).toBe(200);
      expect((replay.body as { data: unknown }).data).toEqual(
        (first.body as { data: unknown }).data,
      );
      // The process still answers others.
      const after = await mutate('addBookPlain');
      expect(after.status).toBe(200);
    }, 30_000);
  });
}
