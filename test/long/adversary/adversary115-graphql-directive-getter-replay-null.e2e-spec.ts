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
 * Fixed (session of 2026-12-07): a `@Field()` getter under a resolver the library takes for the
 * app's (not a `@ResolveField()`: a schema transform's wrapper) is read by the library once, at
 * its key's turn (`readObjectAhead`), given to the wrapper through the first answer's Proxy,
 * and kept as its input (`KEPT`) for the replay's wrapper (lib/graphql/wrapped-getters.ts,
 * wire-value.ts `readsGetterUnderApp`, resolved-fields.ts `isResolveField`;
 * docs/guides/graphql.md). The read order under "Also seen" (`{ loud url }`) has a test of
 * its own below.
 *
 * Adversary 115 (graphql; `@Directive`s beside the read-ahead of adversary 114, wire-value.ts
 * `readObjectAhead` / `walkValue`): a getter field carrying a schema directive whose transform
 * wraps the field's resolver (Nest's docs' `@upper` example, `transformSchema:
 * upperDirectiveTransformer`), with no field middleware. The library takes the directive's
 * resolver for the app's own code (`fieldResolution(...) === 'app'`): it neither reads nor
 * stores the field, and keeps only the parent's OWN data of that name as the resolver's input
 * (`ownValue`), never a getter. The first call answers `"ADA LOVELACE"` (the directive reads
 * the getter of the class instance). A replay's object is plain data, not an instance: it has
 * no `displayName`, the directive's resolver reads `undefined`, and the non-null field nulls
 * the mutation: the replay of a committed mutation is `data: null` with "Cannot return null
 * for non-nullable field Author.displayName.".
 *
 * Also seen (same setup, a counting signer): the directive's field is read after every other
 * getter of the object, not at its turn (`{ loud url }`: without the library loud n=1, url
 * n=2; with it loud n=2, url n=1), the read order adversary 114 fixed for plain getters.
 *
 * User code: `@ObjectType() class Author { @Field(() => Int) id; first; last; @Field()
 * @Directive('@upper') get displayName() { return `${this.first} ${this.last}` } }`;
 * `GraphQLModule.forRoot({ driver: ApolloDriver, autoSchemaFile: true, transformSchema:
 * (schema) => upperDirectiveTransformer(schema, 'upper'), buildSchemaOptions: { directives: [new
 * GraphQLDirective({ name: 'upper', locations: [DirectiveLocation.FIELD_DEFINITION] })] } })`
 * (Nest's docs, "Directives"); `@Mutation(() => Author) @Idempotent() addAuthor()` returning
 * `new Author(...)`; the client selects `{ id displayName }`.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (`resolution === 'app'`: `ownValue(source,
 * property)` only, a getter is no own value), and `fromWire` (the replay's object is plain data:
 * no getter of the class), under the directive's resolver, which reads the property with
 * `defaultFieldResolver`.
 *
 * Docs quote (docs/guides/graphql.md): "a getter (a signed URL's) and a Promise are read once
 * too, and the first answer is given what was read"; "a replay gives a getter's field through
 * a getter"; "Field middleware: its output, as the first answer gave it ... a schema
 * directive's transform around it included, as Nest's `@upper` example" (the only word on
 * directives: nothing says a directive's getter field replays null).
 *
 * Severity: high (the replay of a committed mutation answers `data: null` where the first call
 * answered the author).
 *
 * Fails now (un-skipped): first call `{"data":{"addAuthor":{"displayName":"ADA LOVELACE"}}}`;
 * replay `{"errors":[{"message":"Cannot return null for non-nullable field
 * Author.displayName.",...,"path":["addAuthor","displayName"],...}],"data":null,"extensions":
 * {"idempotency":{"replayed":["addAuthor"]}}}`.
 *
 * Controls: the same directive on a field that is the object's own data (`@Field()
 * @Directive('@upper') code: string`) answers `"AL-1"` at the first call and on the replay.
 *
 * Suggested fix: where the field's resolver is a wrapper of the default resolver the library
 * cannot tell from the app's own code, still read a getter (or a Promise) behind it as the
 * default read would, in order, and keep what was read as that resolver's input (under
 * `__kept`, through a getter on the replay's object, as a getter field replays); or refuse such
 * a field at start-up / say in the guide that a directive over a getter replays `undefined`.
 */
let pool: Pool;

/** A CDN signer whose nonce counts up, one signer for the app. */
const signer = {
  nonce: 0,
  sign(path: string): string {
    this.nonce += 1;
    return `${path}?n=${this.nonce}`;
  },
};

/** Nest's docs' `upperDirectiveTransformer`. */
function upperDirectiveTransformer(schema: GraphQLSchema, directiveName: string) {
  return mapSchema(schema, {
    [MapperKind.OBJECT_FIELD]: (fieldConfig) => {
      const upper = getDirective(schema, fieldConfig, directiveName)?.[0];
      if (upper) {
        const { resolve = defaultFieldResolver } = fieldConfig;
        fieldConfig.resolve = async function (source, args, context, info) {
          const result: unknown = await resolve(source, args, context, info);
          return typeof result === 'string' ? result.toUpperCase() : result;
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

  @Field()
  @Directive('@upper')
  code: string;

  constructor(
    id: number,
    readonly first: string,
    readonly last: string,
  ) {
    this.id = id;
    this.code = `al-${id}`;
  }

  @Field()
  @Directive('@upper')
  get displayName(): string {
    return `${this.first} ${this.last}`;
  }

  /** Signed as it is read, under the directive. */
  @Field()
  @Directive('@upper')
  get loud(): string {
    return signer.sign(`/a/loud`);
  }

  /** Signed as it is read. */
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
  return new Author(rows[0].id, 'Ada', 'Lovelace');
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
      transformSchema: (schema: GraphQLSchema) => upperDirectiveTransformer(schema, 'upper'),
      buildSchemaOptions: {
        directives: [
          new GraphQLDirective({ name: 'upper', locations: [DirectiveLocation.FIELD_DEFINITION] }),
        ],
      },
    }),
  ],
  providers: [AuthorResolver],
})
class AuthorModule {}

describe("adversary 115: a directive's getter field replays null", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv115_gql_directive_getter', {
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

  const twice = async (query: string, key: string) => {
    const first = await post(query, key);
    const again = await post(query, key);
    // eslint-disable-next-line no-console
    console.log('DIRECTIVE GETTER', query, first.text, again.text);
    return { first, again };
  };

  it('control: the directive on own data answers at the first call and on the replay', async () => {
    const { first, again } = await twice('mutation { addAuthor { code } }', 'adv115-dir-ctl');
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.addAuthor.code).toMatch(/^AL-\d+$/);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it("a directive's getter field replays what the first call answered", async () => {
    const { first, again } = await twice('mutation { addAuthor { displayName } }', 'adv115-dir');
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.addAuthor.displayName).toBe('ADA LOVELACE');
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it("a directive's getter field is read at its turn among the object's getters, as without the library", async () => {
    const plain = await post('mutation { addAuthorPlain { loud url } }');
    const { first, again } = await twice('mutation { addAuthor { loud url } }', 'adv115-dir-order');
    expect(first.body.errors).toBeUndefined();
    expect(plain.body.data.addAuthorPlain.loud).toMatch(/N=1$/);
    expect(JSON.stringify(first.body.data.addAuthor)).toBe(
      JSON.stringify(plain.body.data.addAuthorPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
