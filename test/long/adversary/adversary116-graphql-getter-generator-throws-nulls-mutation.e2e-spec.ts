import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Directive,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { getDirective, MapperKind, mapSchema } from '@graphql-tools/utils';
import {
  defaultFieldResolver,
  DirectiveLocation,
  GraphQLDirective,
  type GraphQLSchema,
} from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07): a field's read-ahead that throws (a generator that fails part
 * way) is left to the walk (`readOrNone` in `readObjectAhead`), which keeps the iterable's
 * error (`failedLists`, in `materialized`) and meets it again in the field's own read, a list
 * field's iterable read there: the field fails alone (`FailedRead`, its error at its path,
 * stored for the replay), as graphql-js' `completeListValue` fails it
 * (lib/graphql/wire-value.ts).
 *
 * Adversary 116 (graphql; a getter's one-shot list (a generator) that throws as it is iterated:
 * lib/graphql/wire-value.ts `readAhead` / `readObjectAhead`, the read-ahead that iterates a
 * getter's generator at its key's turn, commits aa5d824b / 1e7fd3bf).
 *
 * User code: `@Field(() => [String], { nullable: true }) get badTags(): Iterable<string> {
 * return (function* () { yield signer.sign('/b1'); throw new Error('bad tags'); })() }` (a
 * lazy list whose source fails part way: a cursor, a decoder), on the class a `@Idempotent()
 * @Mutation(() => Author) addAuthor()` returns; the client selects `{ url b: badTags }` (one
 * key, no alias) or `{ a: badTags url b: badTags }`.
 *
 * Code path: wire-value.ts `readAhead` iterates the getter's list ahead of the walk
 * (`materialized(walk, value)` -> `listOf` -> `Array.from(iterable)`) with no guard for an
 * iterator that throws; the throw leaves the read-ahead and fails the whole mutation field, where graphql-js' `completeListValue` fails
 * only the list field (nullable: `null` and one error at its path).
 *
 * Docs quote (docs/guides/graphql.md): "a getter (a signed URL's) and a Promise are read once
 * too, and the first answer is given what was read"; the brief's promise: the first call with
 * the library behaves as without it, and bad input "gets a clear error and loses nothing".
 *
 * Severity: high (a committed mutation answers `data: null` with its error at the mutation's
 * path, as if it failed, and the replay answers the same: the client loses the created
 * object's answer (`url`, `id`) and a field error becomes the operation's).
 *
 * Fails now (un-skipped): without the library `{"errors":[{"message":"bad tags",...,"path":
 * ["addAuthorPlain","b"]...}],"data":{"addAuthorPlain":{"url":"/a.jpg?n=1","b":null}}}`; with
 * it `{"errors":[{"message":"bad tags",...,"path":["addAuthor"]...}],"data":null}` (the replay
 * answers this too).
 *
 * Controls: the same generator that does not throw, `{ a: tags url b: tags }`, answers
 * `a` n=1,2, `url` n=3, `b` n=4,5 with and without the library, and the replay answers it.
 *
 * Suggested fix: in `readAhead` (and the later alias's read in `readObjectAhead`), iterate a
 * one-shot list inside a try, keep the items read and the error as the field's failed read
 * (`FailedRead`), and let the walk answer the field's error at the field's path (null in a
 * nullable list field, propagated as graphql-js propagates it), stored for the replay.
 */
let pool: Pool;

const signer = {
  nonce: 0,
  sign(path: string): string {
    this.nonce += 1;
    return `${path}?n=${this.nonce}`;
  },
};

function transformer(schema: GraphQLSchema) {
  return mapSchema(schema, {
    [MapperKind.OBJECT_FIELD]: (fieldConfig) => {
      const { resolve = defaultFieldResolver } = fieldConfig;
      if (getDirective(schema, fieldConfig, 'upper')?.[0]) {
        fieldConfig.resolve = async function (source, args, context, info) {
          const result: unknown = await resolve(source, args, context, info);
          return typeof result === 'string' ? result.toUpperCase() : result;
        };
      }
      if (getDirective(schema, fieldConfig, 'redacted')?.[0]) {
        fieldConfig.resolve = () => '***';
      }
      if (getDirective(schema, fieldConfig, 'twice')?.[0]) {
        fieldConfig.resolve = async function (source, args, context, info) {
          const a: unknown = await resolve(source, args, context, info);
          const b: unknown = await resolve(source, args, context, info);
          return `${String(a)}|${String(b)}`;
        };
      }
      return fieldConfig;
    },
  });
}

@ObjectType()
class Author {
  @Field(() => Int)
  id: number;

  constructor(id: number) {
    this.id = id;
  }

  @Field()
  @Directive('@redacted')
  get secret(): string {
    return signer.sign(`/a/secret`);
  }

  @Field()
  @Directive('@upper')
  get loud(): string {
    return signer.sign(`/a/loud`);
  }

  @Field()
  @Directive('@twice')
  get both(): string {
    return signer.sign(`/a/both`);
  }

  @Field({ nullable: true })
  @Directive('@upper')
  get boom(): string {
    throw new Error('boom getter');
  }

  @Field(() => [String])
  get tags(): Iterable<string> {
    return (function* () {
      yield signer.sign('/t1');
      yield signer.sign('/t2');
    })();
  }

  @Field(() => [String], { nullable: true })
  get badTags(): Iterable<string> {
    return (function* () {
      yield signer.sign('/b1');
      throw new Error('bad tags');
    })();
  }

  @Field(() => [String])
  @Directive('@upper')
  get loudTags(): string[] {
    return [signer.sign('/l1')];
  }

  @Field()
  get url(): string {
    return signer.sign(`/a.jpg`);
  }
}

const makeAuthor = async (): Promise<Author> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO authors DEFAULT VALUES RETURNING id',
  );
  signer.nonce = 0;
  return new Author(rows[0].id);
};

@Resolver(() => Author)
class AuthorResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Author)
  @Idempotent()
  async addAuthor(): Promise<Author> {
    return makeAuthor();
  }

  @Mutation(() => Author)
  async addAuthorPlain(): Promise<Author> {
    return makeAuthor();
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      transformSchema: (schema: GraphQLSchema) => transformer(schema),
      buildSchemaOptions: {
        directives: ['upper', 'redacted', 'twice'].map(
          (name) => new GraphQLDirective({ name, locations: [DirectiveLocation.FIELD_DEFINITION] }),
        ),
      },
    }),
  ],
  providers: [AuthorResolver],
})
class AuthorModule {}

describe("adversary 116: a getter's generator that throws as it is iterated", () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv116_gql_generator_throws', {
      module: AuthorModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE authors (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);
  afterAll(() => fixture?.close());
  const post = (query: string, key?: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(60_000);
    if (key) call.set('Idempotency-Key', key);
    return call.send(JSON.stringify({ query }));
  };
  const compare = async (sel: string, key: string) => {
    const plain = await post(`mutation { addAuthorPlain ${sel} }`);
    const first = await post(`mutation { addAuthor ${sel} }`, key);
    const again = await post(`mutation { addAuthor ${sel} }`, key);
    // eslint-disable-next-line no-console
    console.log('GENERATOR THROWS', sel, plain.text, first.text, again.text);
    const paths = (body: { errors?: { path: string[] }[] }) =>
      JSON.stringify((body.errors ?? []).map((e) => e.path.slice(1)));
    expect(paths(first.body)).toBe(paths(plain.body));
    expect(JSON.stringify(first.body.data?.addAuthor)).toBe(
      JSON.stringify(plain.body.data.addAuthorPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  };

  it('control: a generator that does not throw answers as without the library', async () => {
    await compare('{ a: tags url b: tags }', 'adv116-gen-ctl');
  });

  it("a getter's generator that throws fails its own field, as without the library", async () => {
    await compare('{ url b: badTags }', 'adv116-gen-throws');
  });
});
