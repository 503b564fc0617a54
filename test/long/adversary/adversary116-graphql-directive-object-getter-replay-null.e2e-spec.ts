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
 * Adversary 116 (graphql; a schema directive's wrapper over a `@Field()` getter that returns an
 * OBJECT whose own fields are getters: lib/graphql/wire-value.ts `readsGetterUnderApp` (the
 * getter read once and kept as the wrapper's input, `defineOwn(kept, name, settled.value)`),
 * wrapped-getters.ts, commit 72c3264e).
 *
 * User code: Nest's docs' `@upper` directive (`mapSchema` around `defaultFieldResolver`, which
 * passes a non-string through) on `@Field(() => Profile) @Directive('@upper') get profile() {
 * return new Profile() }`, with `@ObjectType() class Profile { @Field() get pic() { return
 * signer.sign('/p.jpg') } @Field(() => String) name = 'ada' }` (a directive applied to every
 * field of a type, or a logging/auth directive on an object field); `@Mutation(() => Author)
 * @Idempotent() addAuthor()`; the client selects `{ profile { pic name } url }`.
 *
 * Code path: wire-value.ts ~line 820-836: the getter `profile` is read once and the read
 * value kept as the wrapper's input for the replay; what is under it is kept as the object's
 * own data only, and `pic` is a getter of `Profile`, not own data: the replay's wrapper
 * returns the plain `{ name: 'ada' }` and graphql-js reads `pic` off it as `undefined`.
 *
 * Docs quote (docs/guides/graphql.md): "Where the field's property is a getter of the class (a
 * `get displayName()`), the library reads it once ... gives the wrapper what it read at the
 * first call, and stores it as the wrapper's input: a replay's wrapper reads that value
 * (`\"ADA LOVELACE\"` again, never `null`)"; "a replay gives a getter's field through a getter".
 *
 * Severity: high (the replay of a committed mutation answers `data: null` with "Cannot return
 * null for non-nullable field Profile.pic." where the first call answered the author; a
 * Promise of the object (`get asyncProfile(): Promise<Profile>`) and aliases `{ a: profile {
 * pic } b: profile { name } }` replay the same error).
 *
 * Fails now (un-skipped): first call `{"data":{"addAuthor":{"profile":{"pic":"/p.jpg?n=2",
 * "name":"ada"},"url":"/a.jpg?n=1"}}}`; replay `{"errors":[{"message":"Cannot return null for
 * non-nullable field Profile.pic.",...,"path":["addAuthor","profile","pic"],...}],"data":null,
 * "extensions":{"idempotency":{"replayed":["addAuthor"]}}}`.
 *
 * Controls: the same wrapped object field selecting only its own data, `{ profile { name }
 * url }`, answers as without the library and replays byte for byte.
 *
 * Suggested fix: under a wrapped getter whose value is an object (or a list of objects), walk
 * the wrapper's input as a property field's value is walked (read its selected getters at
 * their turn, store them), and give the replay's wrapper a rebuilt object with those getters'
 * stored values (as `fromWire` rebuilds a plain getter object field); or store the wrapper's
 * answer (its output under the selection) rather than its input for such fields.
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
class Profile {
  @Field()
  get pic(): string {
    return signer.sign('/p.jpg');
  }

  @Field(() => String)
  name = 'ada';
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

  @Field(() => Profile)
  @Directive('@upper')
  get profile(): Profile {
    return new Profile();
  }

  @Field(() => Profile)
  @Directive('@upper')
  get asyncProfile(): Promise<Profile> {
    return Promise.resolve(new Profile());
  }

  @Field(() => String)
  @Directive('@upper')
  get later(): Promise<string> {
    return Promise.resolve(signer.sign('/later'));
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

describe("adversary 116: a directive's getter field of an object type on a replay", () => {
  let fixture: PoolApp;
  beforeAll(async () => {
    fixture = await startPoolApp('adv116_gql_dir_object_getter', {
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
    console.log('DIRECTIVE OBJECT GETTER', sel, plain.text, first.text, again.text);
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.addAuthor)).toBe(
      JSON.stringify(plain.body.data.addAuthorPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['addAuthor']);
    expect(again.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  };

  it("control: the wrapped object field's own data replays as the first call answered", async () => {
    await compare('{ profile { name } url }', 'adv116-dirobj-ctl');
  });

  it.skip("a directive's getter field of an object type replays its getters' values (Not fixed (round 116): found by review)", async () => {
    await compare('{ profile { pic name } url }', 'adv116-dirobj');
  });
});
