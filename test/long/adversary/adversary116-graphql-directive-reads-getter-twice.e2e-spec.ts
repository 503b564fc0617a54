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
 * Adversary 116 (graphql; a directive's wrapper that reads its `@Field()` getter twice:
 * lib/graphql/wire-value.ts `readsGetterUnderApp`, wrapped-getters.ts).
 *
 * User code: a `@twice` directive whose `mapSchema` transform calls the field's resolver
 * (`defaultFieldResolver`) twice and joins the two reads (a wrapper comparing, retrying or
 * logging a before/after value), on `@Field() @Directive('@twice') get both() { return
 * signer.sign('/a/both') }`, beside `@Field() get url()`; `@Idempotent() addAuthor()`; the
 * client selects `{ both url }`.
 *
 * Code path: wire-value.ts ~line 826: the getter is read once ahead and its value put on the
 * first answer's Proxy as data (`replaced[property] = settled.value`): the wrapper's two
 * `defaultFieldResolver` calls both see that one value; the getter runs once, not twice, and
 * at the walk's time, not between the wrapper's awaits.
 *
 * Docs quote (docs/guides/graphql.md): "the library reads it once, at its field's turn as
 * GraphQL reads it, gives the wrapper what it read at the first call"; the brief's promise:
 * same reads, same count, same order, same values as without the library.
 *
 * Severity: medium (the first call answers differently from the app without the library, and
 * the getter's side effects run once where the app's code runs them twice).
 *
 * Fails now (un-skipped): without the library `{"both":"/a/both?n=1|/a/both?n=3","url":
 * "/a.jpg?n=2"}`; with it `{"both":"/a/both?n=1|/a/both?n=1","url":"/a.jpg?n=2"}`.
 *
 * Controls: `{ loud url }` under `@upper` (one read by the wrapper) answers as without the
 * library, and on the replay.
 *
 * Suggested fix: give the wrapper a live getter on the Proxy that calls the instance's getter
 * on each read and records every value in order; store the recorded reads as the wrapper's
 * inputs, and on the replay give them back in the same order (a getter answering the n-th
 * stored read at its n-th read).
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

describe('adversary 116: a directive that reads its getter twice', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv116_gql_dir_twice', {
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

  it('control: a directive that reads its getter once answers as without the library', async () => {
    const plain = await post('mutation { addAuthorPlain { loud url } }');
    const { first, again } = await twice('mutation { addAuthor { loud url } }', 'adv116-twice-ctl');
    expect(plain.body.errors).toBeUndefined();
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.addAuthor)).toBe(
      JSON.stringify(plain.body.data.addAuthorPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it.skip('a directive that reads its getter twice sees two reads, as without the library (Not fixed (round 116): found by review)', async () => {
    const plain = await post('mutation { addAuthorPlain { both url } }');
    const { first, again } = await twice('mutation { addAuthor { both url } }', 'adv116-twice');
    expect(plain.body.errors).toBeUndefined();
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.addAuthor)).toBe(
      JSON.stringify(plain.body.data.addAuthorPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
