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
 * Adversary 116 (graphql; a schema directive's wrapper that never reads its field, over a
 * `@Field()` getter: lib/graphql/wrapped-getters.ts, wire-value.ts `readsGetterUnderApp`).
 *
 * User code: a `@redacted` directive whose `mapSchema` transform replaces the field's resolver
 * with `() => '***'` (never calling `defaultFieldResolver`), on `@Field() @Directive('@redacted')
 * get secret() { return signer.sign('/a/secret') }`, beside a plain `@Field() get url()` that
 * signs too; `@Mutation(() => Author) @Idempotent() addAuthor()` returning `new Author(...)`;
 * the client selects `{ secret url }`.
 *
 * Code path: lib/graphql/wire-value.ts `readsGetterUnderApp` -> wrapped-getters.ts
 * `readsWrappedGetter` (`!resolveField && nestField && getter`) and the read at the key's turn
 * (`readGiven(() => source[property])`, ~line 826): the library reads the getter because the
 * field is a getter under a wrapper, whether or not the wrapper ever reads the property.
 *
 * Docs quote (docs/guides/graphql.md): "Where the field's property is a getter of the class (a
 * `get displayName()`), the library reads it once, at its field's turn as GraphQL reads it";
 * the brief's promise: "the first call with the library behaves toward the app's code exactly
 * as without it (same reads, same count, same order, same values)".
 *
 * Severity: medium (an extra read of the app's getter: one extra signature / side effect at the
 * first call that graphql-js never makes; the app's later reads see another value).
 *
 * Fails now (un-skipped): without the library `{"secret":"***","url":"/a.jpg?n=1"}`; with it
 * `{"secret":"***","url":"/a.jpg?n=2"}` (the getter `secret` was read, signing n=1).
 *
 * Controls: `{ loud url }` under Nest's `@upper` (a wrapper that reads its getter once) answers
 * `/A/LOUD?N=1`, `/a.jpg?n=2` with and without the library, and on the replay.
 *
 * Suggested fix: do not read ahead; give the wrapper a source whose property is a getter that
 * reads the instance's getter on demand, records what it returned (once per read), and stores
 * the recorded value as the wrapper's input; a wrapper that never reads leaves nothing to store
 * (its replay never reads either).
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

describe('adversary 116: a directive that never reads its getter field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv116_gql_dir_const', {
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

  it('control: a directive that reads its getter answers as without the library', async () => {
    const plain = await post('mutation { addAuthorPlain { loud url } }');
    const { first, again } = await twice('mutation { addAuthor { loud url } }', 'adv116-const-ctl');
    expect(plain.body.errors).toBeUndefined();
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.addAuthor)).toBe(
      JSON.stringify(plain.body.data.addAuthorPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it.skip('a directive that answers a constant makes no read of the getter (the next getter signs n=1 as without the library) (Not fixed (round 116): found by review)', async () => {
    const plain = await post('mutation { addAuthorPlain { secret url } }');
    const { first, again } = await twice('mutation { addAuthor { secret url } }', 'adv116-const');
    expect(plain.body.errors).toBeUndefined();
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.addAuthor)).toBe(
      JSON.stringify(plain.body.data.addAuthorPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
