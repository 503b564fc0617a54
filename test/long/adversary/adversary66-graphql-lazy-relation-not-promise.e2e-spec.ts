import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import {
  Args,
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
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 66: a lazy relation (TypeORM's `{ lazy: true }`: a field typed
 * `Promise<Author>`, a getter that loads it once) is no longer a Promise in the FIRST answer's
 * value when the operation selects it: a `@ResolveField()` of the same object that uses it as
 * the Promise its type says it is (`book.author.then((a) => \`by ${a.name}\`)`, or `.catch()`,
 * `.finally()`, `instanceof Promise`) fails with "book.author.then is not a function" for a
 * mutation that committed. Without the library it answers "by Ada Lovelace"; the replay fails
 * the same way (the stored author is a plain object).
 *
 * What happens: storing awaits the selected `author` and the first answer is
 * `over(source, replaced)` (lib/graphql/wire-value.ts), whose `get` trap answers `author` with
 * the awaited Author, not with a Promise of it (`replaced[name] = stored.value` for
 * `isThenable(promisedItem)`). GraphQL itself awaits either, so the answer's `author` is the
 * same; the app's own code under the mutation reads the parent (`@Parent()`), and gets a value
 * of another type than the resolver gave. A replay gives `author` as the stored plain object.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "The first call gets the
 * resolver's own value"; "a getter (a signed URL's) and a Promise are read once too, and the
 * first answer is given what was read" -- what was read is a Promise's value, but the first
 * answer should give it as a Promise (one already settled with that value), so that the
 * parent's fields keep their types for the resolvers under it; the replay likewise.
 *
 * Controls (pass): the same without `@Idempotent()`; with `@Idempotent()` and an operation that
 * does not select `author` (not replaced: the resolver reads the relation's own Promise).
 *
 * Severity: medium (a committed mutation's field answered null with an error, on every answer
 * to the key, in an app that only used its lazy relations as TypeORM types them).
 *
 * Fixed: a field whose value was a Promise is a Promise of the stored value on the first answer,
 * and on a replay (`PROMISED`, lib/graphql/wire-value.ts).
 */
let pool: Pool;

@ObjectType()
class Author {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;
}

async function loadAuthor(id: number): Promise<Author> {
  const { rows } = await pool.query<{ id: number; name: string }>(
    'SELECT id, name FROM authors WHERE id = $1',
    [id],
  );
  return Object.assign(new Author(), rows[0]);
}

@ObjectType()
class Book {
  @Field(() => Int)
  id: number;

  @Field()
  title: string;

  authorId: number;

  private loaded?: Promise<Author>;

  /** A lazy relation, as TypeORM makes one: a getter that loads it once, a Promise. */
  @Field(() => Author)
  get author(): Promise<Author> {
    return (this.loaded ??= loadAuthor(this.authorId));
  }

  constructor(id: number, title: string, authorId: number) {
    this.id = id;
    this.title = title;
    this.authorId = authorId;
  }
}

@Resolver(() => Book)
class BooksResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Book)
  @Idempotent()
  async addBook(@Args('title') title: string): Promise<Book> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO books (title, author_id) VALUES ($1, 1) RETURNING id',
      [title],
    );
    return new Book(rows[0].id, title, 1);
  }

  /** The same, without @Idempotent(): what the app answers without the library. */
  @Mutation(() => Book)
  async addBookUnkeyed(@Args('title') title: string): Promise<Book> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO books (title, author_id) VALUES ($1, 1) RETURNING id',
      [title],
    );
    return new Book(rows[0].id, title, 1);
  }

  @ResolveField(() => String, { nullable: true })
  byline(@Parent() book: Book): Promise<string> {
    return book.author.then((author) => `by ${author.name}`);
  }
}

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
      });
}

describe.each(GRAPHQL_DRIVERS)(
  'adversary 66: a lazy relation read by a @ResolveField() of its parent, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [BooksResolver],
      })
      class BooksModule {}
      fixture = await startPoolApp(`adv66_lazy_${driver}`, {
        module: BooksModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE authors (id int PRIMARY KEY, name text NOT NULL)');
          await owner.query("INSERT INTO authors VALUES (1, 'Ada Lovelace')");
          await owner.query(
            'CREATE TABLE books (id serial PRIMARY KEY, title text NOT NULL, author_id int NOT NULL)',
          );
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    const send = (key: string, query: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .timeout(5_000)
        .send({ query });
    const rows = async (title: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM books WHERE title = $1', [title])).rows[0]
          .count,
      );
    const book = (field: string, title: string) => ({
      data: {
        [field]: {
          id: expect.any(Number),
          title,
          author: { name: 'Ada Lovelace' },
          byline: 'by Ada Lovelace',
        },
      },
    });

    it('control: without @Idempotent(), the byline is answered', async () => {
      const title = `${driver}-unkeyed`;
      const answer = await send(
        title,
        `mutation { addBookUnkeyed(title: "${title}") { id title author { name } byline } }`,
      );
      expect(answer.body).toEqual(book('addBookUnkeyed', title));
    });

    it('control: author not selected: the first answer has the byline', async () => {
      const title = `${driver}-unselected`;
      const answer = await send(
        title,
        `mutation { addBook(title: "${title}") { id title byline } }`,
      );
      expect(answer.body).toEqual({
        data: { addBook: { id: expect.any(Number), title, byline: 'by Ada Lovelace' } },
      });
      expect(await rows(title)).toBe(1);
    });

    it('author selected: the first answer has the byline, as without the library', async () => {
      const title = `${driver}-selected`;
      const answer = await send(
        title,
        `mutation { addBook(title: "${title}") { id title author { name } byline } }`,
      );
      expect(await rows(title)).toBe(1);
      // Fails: byline null, errors: ["book.author.then is not a function"] at ["addBook", "byline"].
      expect(answer.body).toEqual(book('addBook', title));
    });

    it('author selected: its replay has the byline too', async () => {
      const title = `${driver}-replayed`;
      const query = `mutation { addBook(title: "${title}") { id title author { name } byline } }`;
      await send(title, query);
      const replay = await send(title, query);
      expect(await rows(title)).toBe(1);
      // Fails the same way: the replay's author is the stored plain object.
      expect(replay.body).toEqual({
        ...book('addBook', title),
        extensions: { idempotency: { replayed: ['addBook'] } },
      });
    });
  },
);
