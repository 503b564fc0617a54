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
 * Adversary 116 (graphql; a directive's `@Field()` getter under two aliases:
 * lib/graphql/wire-value.ts `readsGetterUnderApp`, `readObjectAhead` `perAlias`).
 *
 * User code: Nest's docs' `@upper` directive (`mapSchema` wrapping `defaultFieldResolver`) on
 * `@Field() @Directive('@upper') get loud() { return signer.sign('/a/loud') }` (a signed URL, a
 * nonce), beside `@Field() get url()`; `@Mutation(() => Author) @Idempotent() addAuthor()`; the
 * client selects the field under two aliases: `{ a: loud b: loud url }`.
 *
 * Code path: wire-value.ts ~line 826 `reads.reads.get(responseKeys(fieldNodes)[0]) ??
 * readGiven(...)`: one read for the field, under its first key; `readObjectAhead`'s `perAlias`
 * counts only `fieldResolution(...) === 'property'` fields, so a wrapper's field (`'app'`) is
 * read once for all its aliases, and every alias's wrapper is given that one value.
 *
 * Docs quote (docs/guides/graphql.md): "the library reads it once, at its field's turn as
 * GraphQL reads it, gives the wrapper what it read"; graphql-js runs the wrapper once per
 * alias, and each run reads the getter (the guide's plain getters under aliases are read per
 * alias: `readsPerAlias`).
 *
 * Severity: medium (the first call answers and signs differently from the app without the
 * library: one signature where the app makes two, the second alias answers the first's nonce).
 *
 * Fails now (un-skipped): without the library `{"a":"/A/LOUD?N=1","b":"/A/LOUD?N=2","url":
 * "/a.jpg?n=3"}`; with it `{"a":"/A/LOUD?N=1","b":"/A/LOUD?N=1","url":"/a.jpg?n=2"}`.
 *
 * Controls: the same field under one key, `{ loud url }`, answers `/A/LOUD?N=1`, `/a.jpg?n=2`
 * with and without the library, and on the replay.
 *
 * Suggested fix: read a wrapper's getter per alias at each alias's turn (as `readsPerAlias`
 * does for a plain getter leaf), store each alias's read as its own wrapper's input (keyed by
 * response key), and give each alias's wrapper its own read through the Proxy.
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

  @Field({ nullable: true })
  get boomPlain(): string {
    throw new Error('boom getter');
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

describe("adversary 116: a directive's getter field under two aliases", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv116_gql_dir_alias', {
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
    console.log('ADV116', query, first.text, again.text);
    return { first, again };
  };

  it("control: a directive's getter field under one key answers as without the library", async () => {
    const plain = await post('mutation { addAuthorPlain { loud url } }');
    const { first, again } = await twice('mutation { addAuthor { loud url } }', 'adv116-alias-ctl');
    expect(plain.body.errors).toBeUndefined();
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.addAuthor)).toBe(
      JSON.stringify(plain.body.data.addAuthorPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it.skip("a directive's getter field under two aliases is read once per alias, as without the library (Not fixed (round 116): found by review)", async () => {
    const plain = await post('mutation { addAuthorPlain { a: loud b: loud url } }');
    const { first, again } = await twice(
      'mutation { addAuthor { a: loud b: loud url } }',
      'adv116-alias',
    );
    expect(plain.body.errors).toBeUndefined();
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.addAuthor)).toBe(
      JSON.stringify(plain.body.data.addAuthorPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
