import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type INestApplication, Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
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
import {
  Column,
  type DataSource,
  Entity,
  JoinColumn,
  type Logger,
  ManyToOne,
  PrimaryGeneratedColumn,
} from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Adversary 76: an unselected TypeORM lazy relation of a field middleware's input is loaded by
 * the library: for each item, `getterFields` reads every unselected field that is a getter,
 * and a lazy relation is one (TypeORM defines it on the entity's prototype), so reading it
 * starts its SELECT, whose Promise the library then drops. N items, N queries the app never
 * asked for, while the mutation's transaction is still open.
 *
 * The user code (Apollo on Express, TypeORM):
 *
 *   @ObjectType() @Entity('books') class Book {
 *     @Field(() => Int) @PrimaryGeneratedColumn() id!: number;
 *     @Field() @Column() title!: string;
 *     @Column({ name: 'author_id' }) authorId!: number;
 *     @Field(() => Author) @ManyToOne(() => Author, { lazy: true }) @JoinColumn({ name: 'author_id' }) author!: Promise<Author>;
 *   }
 *   const byTitle: FieldMiddleware = async (_ctx, next) =>
 *     [...((await next()) as Book[])].sort((a, b) => a.title.localeCompare(b.title));
 *   @ObjectType() class Shelf { @Field(() => Int) id; @Field(() => [Book], { middleware: [byTitle] }) books; }
 *   @Mutation(() => Shelf) @Idempotent() shelve() { save; return { id, books: await books.find() }; }
 *
 * and the client selects `{ id books { id title } }` (not `author`).
 *
 * Why: `walkValue` (lib/graphql/wire-value.ts) walks `books` with `whole = 'middleware'` and
 * collects, for each book, `getterFields(source, unselected)` (lib/graphql/middleware-extras.ts):
 * `throughGetter` is true for TypeORM's lazy accessor, the getter is called (the load starts),
 * and its Promise is left out ("a getter that throws or gives a Promise is left out"), after
 * the query was sent.
 *
 * What the docs promise (docs/guides/graphql.md): "a field the operation does not select is
 * neither read (a getter is not called, a TypeORM lazy relation not loaded) nor stored";
 * behind middleware a getter that "gives a Promise is left out".
 *
 * Control: the same books behind no middleware: no author is loaded; and the same mutation
 * without `@Idempotent()` through the middleware: none either.
 *
 * Severity: low (no wrong answer; N extra queries per call, inside the request).
 *
 * Fails now: 3 `SELECT ... FROM "authors"` are logged for the first call of 3 books.
 *
 * Suggested fix: in `getterFields`, skip a TypeORM lazy relation (told by TypeORM's metadata,
 * or by its accessor's name) before calling it, as the selection walk never calls an
 * unselected getter.
 *
 * Fixed (round 78): the library no longer reads nor stores a field middleware's input, and
 * never runs the middleware on a replay. The answer commits with the resolver's effects as
 * before (lib/graphql/run-field.ts `settle`), its middleware outputs pending; the operation's
 * answer hook (lib/graphql/replay-marker.ts: Apollo `willSendResponse`, Mercurius
 * `onResolution`) takes each middleware field's output from the answer's data, as the client
 * got it (masked by an outer serializer), and completes the stored answer with one fenced
 * UPDATE (`ClaimStore.completeAnswer`, lib/graphql/output-paths.ts `storeOutputsOf`). On a
 * replay a wrapper on each middleware field of the schema (lib/graphql/middleware-outputs.ts
 * `answerOutputsOf`) answers the stored output for its path, its scalars through
 * `parseValue()`; a replay meeting the outputs pending waits for them, bounded, then answers
 * `field_output_pending`. middleware-input.ts and middleware-extras.ts are gone.
 */

/** The statements TypeORM sent, as its logger is told of them. */
const statements: string[] = [];
class Recorder implements Logger {
  logQuery(query: string): void {
    statements.push(query);
  }
  logQueryError(): void {}
  logQuerySlow(): void {}
  logSchemaBuild(): void {}
  logMigration(): void {}
  log(): void {}
}

const authorLoads = () => statements.filter((sql) => /FROM "authors"/.test(sql)).length;

@ObjectType()
@Entity({ name: 'authors', synchronize: false })
class Author {
  @Field(() => Int)
  @PrimaryGeneratedColumn()
  id!: number;

  @Field()
  @Column({ type: 'text' })
  name!: string;
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
  @ManyToOne(() => Author, { lazy: true })
  @JoinColumn({ name: 'author_id' })
  author!: Promise<Author>;
}

/** Nest's field middleware: the books by title. */
const byTitle: FieldMiddleware = async (_ctx, next) =>
  [...((await next()) as Book[])].sort((a, b) => a.title.localeCompare(b.title));

@ObjectType()
class Shelf {
  @Field(() => Int)
  id!: number;

  @Field(() => [Book], { middleware: [byTitle] })
  books!: Book[];
}

@ObjectType()
class BareShelf {
  @Field(() => Int)
  id!: number;

  @Field(() => [Book])
  books!: Book[];
}

@Resolver()
class ShelvesResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async shelf(): Promise<{ id: number; books: Book[] }> {
    const [{ id }] = await this.dataSource.query<{ id: number }[]>(
      'INSERT INTO shelves DEFAULT VALUES RETURNING id',
    );
    const books = await this.dataSource.getRepository(Book).find({ order: { id: 'ASC' } });
    return { id, books };
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Shelf)
  @Idempotent()
  shelve(): Promise<Shelf> {
    return this.shelf();
  }

  @Mutation(() => BareShelf)
  @Idempotent()
  shelveBare(): Promise<BareShelf> {
    return this.shelf();
  }

  @Mutation(() => Shelf)
  shelvePlain(): Promise<Shelf> {
    return this.shelf();
  }
}

describe('adversary 76: an unselected lazy relation of a middleware input loaded', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv76_gql_mw_lazy_loaded');
    const admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query('CREATE TABLE authors (id serial PRIMARY KEY, name text NOT NULL)');
    await admin.query(
      'CREATE TABLE books (id serial PRIMARY KEY, title text NOT NULL, author_id int NOT NULL REFERENCES authors (id))',
    );
    await admin.query('CREATE TABLE shelves (id serial PRIMARY KEY)');
    await admin.query(`INSERT INTO authors (name) VALUES ('Ursula'), ('Octavia'), ('Iain')`);
    await admin.query(
      `INSERT INTO books (title, author_id) VALUES ('Earthsea', 1), ('Kindred', 2), ('Excession', 3)`,
    );
    await admin.end();
    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          entities: [Author, Book],
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: true,
          logging: ['query'],
          logger: new Recorder(),
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          graphiql: false,
        }),
      ],
      providers: [ShelvesResolver],
    })
    class ShelvesModule {}
    app = await bootstrapTestApp(ShelvesModule, 'express');
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  const post = (query: string, key?: string) => {
    const call = request(app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json');
    if (key) call.set('Idempotency-Key', key);
    return call.timeout(20_000).send(JSON.stringify({ query }));
  };

  const titles = [{ title: 'Earthsea' }, { title: 'Excession' }, { title: 'Kindred' }];

  it('control: without the library, or without middleware, no author is loaded', async () => {
    statements.length = 0;
    const plain = await post('mutation { shelvePlain { id books { title } } }');
    expect(plain.body.data.shelvePlain.books).toEqual(titles);
    const bare = await post('mutation { shelveBare { id books { title } } }', 'adv76-mw-lazy-c');
    expect(bare.body.errors).toBeUndefined();
    expect(authorLoads()).toBe(0);
  });

  it('behind middleware: the unselected author is not loaded', async () => {
    statements.length = 0;
    const first = await post('mutation { shelve { id books { title } } }', 'adv76-mw-lazy-a');
    expect(first.body.data.shelve.books).toEqual(titles);
    // Fails: 3 author loads, one per book.
    expect(authorLoads()).toBe(0);
  });
});
