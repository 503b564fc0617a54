import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  createUnionType,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07): lib/graphql/wire-value.ts `readAhead` tells a union's or an
 * interface's member as graphql-js does where it completes the value (`memberAhead`: the
 * type's `resolveType()`, or graphql-js' own `defaultTypeResolver`), synchronously where it
 * answers so, and reads the member ahead at its field's turn; a member told by a Promise is
 * read once it settles (`settled`). The walk takes that member (`walkValue`), so the app's
 * `resolveType()` is called by the library once, as before (docs/guides/graphql.md).
 *
 * Adversary 115 (graphql; read-through of adversary 114's read order, wire-value.ts
 * `readAhead`, with a union and its `resolveType`).
 *
 * User code: one CDN signer whose nonce counts up (adversary 114's); `@ObjectType() class
 * Image { @Field(() => Int) id; @Field() get url() { return signer.sign(...) } }`, `@ObjectType()
 * class Video { ... @Field() get url() }`; `const Media = createUnionType({ name: 'Media',
 * types: () => [Image, Video], resolveType: (value) => (value instanceof Video ? Video : Image)
 * })` (a synchronous `resolveType`, as Nest's docs write it); `@ObjectType() class Post {
 * @Field(() => Int) id; @Field(() => Media) media; @Field(() => Image) cover }`; the client
 * selects `{ media { ... on Image { url } ... on Video { url } } cover { url } }`; Apollo,
 * code-first.
 *
 * Code path: lib/graphql/wire-value.ts `readAhead` (`const concrete = graphql.isObjectType(type)
 * ? type : typeOf(graphql, schema, value)`: `typeOf` reads only a `__typename`, so a union's
 * value told by its `resolveType()` is not read ahead at all), then `walkValue` reads it when
 * the walk reaches it (`await memberType(...)`, then `readObjectAhead`): after every sibling
 * field read ahead synchronously, `cover.url` included.
 *
 * Docs quote (docs/guides/graphql.md): "The library reads the answer's fields in the order
 * graphql-js executes them: an object's selected fields by response key, ... each key's value
 * read through before the next key (depth-first) ... a signer whose nonce counts up signs
 * each field as without the library"; "A member of a union or an interface is stored as the
 * type its `resolveType()` names (called with the field's context and info, as GraphQL calls
 * it ...)".
 *
 * Severity: high (by adversary 114's measure: the first answer differs from the app's own,
 * other signatures on other fields, and every replay keeps it).
 *
 * Fails now (un-skipped): without the library `{"media":{"url":"/v/1.mp4?n=1"},"cover":{"url":
 * "/i/2.jpg?n=2"}}`; with it (first answer and replay) `{"media":{"url":"/v/1.mp4?n=2"},
 * "cover":{"url":"/i/2.jpg?n=1"}}`: the video and the cover swap their signatures. The same
 * under Mercurius (`MercuriusDriver`, code-first, fastify), seen in the review's scratch runs.
 *
 * Controls: the union selected after the plain field (`{ cover { url } media { ... } }`: the
 * walk's order and graphql-js's agree) answers as without the library and replays the same
 * bytes.
 *
 * Suggested fix: in `readAhead`, tell a union's or an interface's member as the walk does
 * (`memberType`), synchronously where `resolveType()` / `isTypeOf()` answers synchronously (a
 * string or a class, not a Promise), and read it ahead there; only a member told by a Promise
 * is read once it settles, as graphql-js completes it then.
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

@ObjectType()
class Image {
  @Field(() => Int)
  id: number;

  constructor(id: number) {
    this.id = id;
  }

  @Field()
  get url(): string {
    return signer.sign(`/i/${this.id}.jpg`);
  }
}

@ObjectType()
class Video {
  @Field(() => Int)
  id: number;

  constructor(id: number) {
    this.id = id;
  }

  @Field()
  get url(): string {
    return signer.sign(`/v/${this.id}.mp4`);
  }
}

const Media = createUnionType({
  name: 'Media',
  types: () => [Image, Video] as const,
  resolveType: (value: Image | Video) => (value instanceof Video ? Video : Image),
});

@ObjectType()
class Post {
  @Field(() => Int)
  id!: number;

  @Field(() => Media)
  media!: Image | Video;

  @Field(() => Image)
  cover!: Image;
}

const makePost = async (): Promise<Post> => {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO posts DEFAULT VALUES RETURNING id',
  );
  signer.nonce = 0;
  return { id: rows[0].id, media: new Video(1), cover: new Image(2) };
};

@Resolver(() => Post)
class PostResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Post)
  @Idempotent()
  async makePost(): Promise<Post> {
    return makePost();
  }

  @Mutation(() => Post)
  async makePostPlain(): Promise<Post> {
    return makePost();
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [PostResolver],
})
class PostModule {}

describe("adversary 115: a union's member is read after its siblings", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv115_gql_union_read_late', {
      module: PostModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE posts (id serial PRIMARY KEY)');
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

  const three = async (sel: string, key: string) => {
    const plain = await post(`mutation { makePostPlain ${sel} }`);
    const first = await post(`mutation { makePost ${sel} }`, key);
    const again = await post(`mutation { makePost ${sel} }`, key);
    // eslint-disable-next-line no-console
    console.log('UNION ORDER', sel, plain.text, first.text, again.text);
    return { plain, first, again };
  };

  const media = 'media { ... on Image { url } ... on Video { url } }';

  it('control: the union selected after the plain field answers as without the library, and replays', async () => {
    const { plain, first, again } = await three(`{ cover { url } ${media} }`, 'adv115-union-ctl');
    expect(plain.body.data.makePostPlain).toEqual({
      cover: { url: '/i/2.jpg?n=1' },
      media: { url: '/v/1.mp4?n=2' },
    });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.makePost)).toBe(
      JSON.stringify(plain.body.data.makePostPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['makePost']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it("a union's member is read at its field's turn, as without the library", async () => {
    const { plain, first, again } = await three(`{ ${media} cover { url } }`, 'adv115-union');
    expect(plain.body.data.makePostPlain).toEqual({
      media: { url: '/v/1.mp4?n=1' },
      cover: { url: '/i/2.jpg?n=2' },
    });
    expect(first.body.errors).toBeUndefined();
    expect(JSON.stringify(first.body.data.makePost)).toBe(
      JSON.stringify(plain.body.data.makePostPlain),
    );
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['makePost']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
