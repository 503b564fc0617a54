import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { randomUUID } from 'node:crypto';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 76: a selected computed field (`@Field() get downloadUrl()`, a URL signed with a
 * fresh nonce) of the items of a `Map` behind list middleware is read twice at the first call:
 * once by the library, which keeps the Map with its items' getter fields read
 * (`withGetterFields`), and once more by GraphQL, which reads the first answer's items, the
 * resolver's own instances. The client gets the second signature; every replay the first.
 *
 * The user code (Apollo on Express):
 *
 *   @ObjectType() class File {
 *     @Field() name!: string;
 *     @Field() get downloadUrl(): string { return sign(`/files/${this.name}`); } // fresh nonce
 *   }
 *   const fromMap: FieldMiddleware = async (_ctx, next) => {
 *     const files = await next();
 *     return files instanceof Map ? [...files.values()] : files;
 *   };
 *   @ObjectType() class Upload { @Field(() => Int) id; @Field(() => [File], { middleware: [fromMap] }) files; }
 *   @Mutation(() => Upload) @Idempotent() createUpload() { insert; return { id, files: new Map([['a', new File('a.pdf')], ...]) }; }
 *
 * and the client selects `{ id files { name downloadUrl } }`.
 *
 * Why: `fitsListType` (lib/graphql/middleware-input.ts) is false for a Map, so `walkValue`
 * (lib/graphql/wire-value.ts) keeps `withGetterFields(input, itemFields)`
 * (lib/graphql/middleware-extras.ts), a copy whose items hold each getter's value, read then;
 * `keepInput` sets `replaced[property]` only for a getter, a Promise or a spent iterator on
 * the parent, so the first answer's middleware gets the resolver's own Map, and GraphQL's
 * default resolver reads `downloadUrl` from its `File`s again.
 *
 * What the docs promise (docs/guides/graphql.md): "the items of a `Map`, a `Set` or a record
 * kept with the fields their class computes (a line's `get totalCents()`), read once"; "a
 * getter (a signed URL's) and a Promise are read once too, and the first answer is given what
 * was read ... never read again"; a retry gets the first answer's bytes but for the marker.
 *
 * Control: the same files as an array behind the same middleware (walked, the first answer
 * given the values the library read): signed once per file, the replay the first answer.
 *
 * Severity: medium (every replay answers URLs the client never got; the getter, a signature,
 * runs twice).
 *
 * Fails now: the replay's `downloadUrl`s carry other nonces than the first answer's, and
 * `downloadUrl` was signed 4 times for 2 files.
 *
 * Suggested fix: give the first answer's middleware the container the library kept (its items
 * answering the getter values read, through stand-ins as `over()` makes), not the resolver's.
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
let pool: Pool;
let signatures = 0;

function sign(path: string): string {
  signatures += 1;
  return `https://cdn.example${path}?nonce=${randomUUID()}`;
}

/** Nest's field middleware: the files, kept by name, as a list. */
const fromMap: FieldMiddleware = async (_ctx, next) => {
  const files: unknown = await next();
  return files instanceof Map ? [...(files as Map<string, File>).values()] : files;
};

@ObjectType()
class File {
  constructor(name: string) {
    this.name = name;
  }

  @Field()
  name: string;

  @Field()
  get downloadUrl(): string {
    return sign(`/files/${this.name}`);
  }
}

@ObjectType()
class Upload {
  @Field(() => Int)
  id!: number;

  @Field(() => [File], { middleware: [fromMap] })
  files!: Map<string, File> | File[];
}

@Resolver(() => Upload)
class UploadsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Upload)
  @Idempotent()
  async createUpload(
    @Args('asArray', { type: () => Boolean, defaultValue: false }) asArray: boolean,
  ): Promise<Upload> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO uploads DEFAULT VALUES RETURNING id',
    );
    const files = [new File('a.pdf'), new File('b.pdf')];
    return {
      id: rows[0].id,
      files: asArray ? files : new Map(files.map((file) => [file.name, file])),
    };
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
  providers: [UploadsResolver],
})
class UploadsModule {}

describe('adversary 76: a Map item getter behind list middleware signed twice', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_map_getter_twice', {
      module: UploadsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE uploads (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { text: string }) =>
    first.text.trim().replace(/}$/, ',"extensions":{"idempotency":{"replayed":["createUpload"]}}}');

  const rows = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM uploads')).rows[0].n,
    );

  it('control: the files as an array, signed once, the replay the first answer', async () => {
    const query = 'mutation { createUpload(asArray: true) { id files { name downloadUrl } } }';
    const before = await rows();
    signatures = 0;
    const first = await post('adv76-mw-map-getter-twice-c', query);
    expect(first.body.errors).toBeUndefined();
    expect(signatures).toBe(2);
    const again = await post('adv76-mw-map-getter-twice-c', query);
    expect(again.text.trim()).toBe(replayOf(first));
    expect(await rows()).toBe(before + 1);
  });

  it('the files as a Map: signed once, the replay the first answer', async () => {
    const query = 'mutation { createUpload { id files { name downloadUrl } } }';
    const before = await rows();
    signatures = 0;
    const first = await post('adv76-mw-map-getter-twice-a', query);
    expect(first.body.errors).toBeUndefined();
    const signedAtFirst = signatures;
    const again = await post('adv76-mw-map-getter-twice-a', query);
    expect(await rows()).toBe(before + 1);
    // Fails: the replay's URLs are the library's signatures, not the first answer's.
    expect(again.text.trim()).toBe(replayOf(first));
    // Fails: 4 signatures for 2 files.
    expect(signedAtFirst).toBe(2);
  });
});
