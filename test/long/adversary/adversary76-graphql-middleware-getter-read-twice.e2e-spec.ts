import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
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
import { randomUUID } from 'node:crypto';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 76: an unselected computed field (`@Field() get downloadUrl()`) of a field
 * middleware's input is read twice at the first call: once by the library, to keep it for the
 * replay's middleware, and once more by the first answer's middleware, which is given the
 * resolver's own instances. A getter that signs a URL with a fresh nonce signs twice, and the
 * first answer's middleware derives its output from the second signature while the stored
 * input holds the first: the replay is not the first answer.
 *
 * The user code (Apollo on Express):
 *
 *   @ObjectType() class File {
 *     @Field() name!: string;
 *     @Field({ nullable: true }) thumbnailUrl?: string;
 *     @Field() get downloadUrl(): string { return sign(`/files/${this.name}`); } // fresh nonce
 *   }
 *   const withThumbnails: FieldMiddleware = async (_ctx, next) =>
 *     ((await next()) as File[]).map((f) => {
 *       const downloadUrl = f.downloadUrl;
 *       return { name: f.name, downloadUrl, thumbnailUrl: `${downloadUrl}&w=64` };
 *     });
 *   @ObjectType() class Upload { @Field(() => Int) id; @Field(() => [File], { middleware: [withThumbnails] }) files; }
 *   @Mutation(() => Upload) @Idempotent() createUpload() { insert; return { id, files: [new File('a.pdf'), ...] }; }
 *
 * and the client selects `{ id files { name thumbnailUrl } }` (not `downloadUrl`).
 *
 * Why: `walkValue` (lib/graphql/wire-value.ts) walks `files` with `whole = 'middleware'`; for
 * each `File` it collects `getterFields(source, unselected)` (lib/graphql/middleware-extras.ts),
 * which reads `downloadUrl` (signature #1) into the pending extras. Nothing of that read goes
 * into `replaced` (only selected fields do), so the item's first-answer value is the
 * resolver's own instance, and the first answer's middleware reads `downloadUrl` again
 * (signature #2). The replay's middleware reads the stored #1.
 *
 * What the docs promise (docs/guides/graphql.md): the field is stored as its middleware's
 * input, "its unselected fields too, its own data and the fields its class computes (a
 * `@Field() get deleted()`, read once ...)"; and of a getter: "read once too, and the first
 * answer is given what was read ... never read again". "The answers are the same bytes when the
 * operation is, but for the replay marker".
 *
 * Control: the same app with `downloadUrl` selected too: the library reads it once, gives the
 * first answer what it read, the replay is the first answer's bytes; and the getter is signed
 * once per call without the library.
 *
 * Severity: medium (every replay answers other bytes than the first answer: a thumbnail URL
 * the client never got; a getter with an effect runs twice).
 *
 * Fails now: the replay's `thumbnailUrl`s carry other nonces than the first answer's, and
 * `downloadUrl` was signed 4 times for 2 files in one call.
 *
 * Suggested fix: give the first answer's middleware the items the library read (a stand-in
 * whose unselected getter fields answer the values kept, as `over()` does for selected
 * ones), or read an unselected getter lazily, once, through that stand-in.
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

const withThumbnails: FieldMiddleware = async (_ctx, next) => {
  const files = (await next()) as File[];
  return files.map((file) => {
    const downloadUrl = file.downloadUrl;
    return { name: file.name, downloadUrl, thumbnailUrl: `${downloadUrl}&w=64` };
  });
};

@ObjectType()
class File {
  constructor(name: string) {
    this.name = name;
  }

  @Field()
  name: string;

  @Field({ nullable: true })
  thumbnailUrl?: string;

  @Field()
  get downloadUrl(): string {
    return sign(`/files/${this.name}`);
  }
}

@ObjectType()
class Upload {
  @Field(() => Int)
  id!: number;

  @Field(() => [File], { middleware: [withThumbnails] })
  files!: File[];
}

@Resolver(() => Upload)
class UploadsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Upload)
  @Idempotent({ required: false })
  async createUpload(): Promise<Upload> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO uploads DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, files: [new File('a.pdf'), new File('b.pdf')] };
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

describe('adversary 76: an unselected getter of a middleware input read twice', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_getter_twice', {
      module: UploadsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE uploads (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string | undefined, query: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json');
    if (key) call.set('Idempotency-Key', key);
    return call.timeout(20_000).send(JSON.stringify({ query }));
  };

  const replayOf = (first: { text: string }) =>
    first.text.replace(/}\n?$/, ',"extensions":{"idempotency":{"replayed":["createUpload"]}}}');

  const rows = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM uploads')).rows[0].n,
    );

  it('control: without a key, each call signs each file once', async () => {
    signatures = 0;
    const first = await post(
      undefined,
      'mutation { createUpload { id files { name thumbnailUrl } } }',
    );
    expect(first.body.errors).toBeUndefined();
    expect(signatures).toBe(2);
  });

  it('control: downloadUrl selected too, the replay is the first answer', async () => {
    const query = 'mutation { createUpload { id files { name thumbnailUrl downloadUrl } } }';
    const before = await rows();
    signatures = 0;
    const first = await post('adv76-mw-getter-twice-c', query);
    expect(first.body.errors).toBeUndefined();
    expect(signatures).toBe(2);
    const again = await post('adv76-mw-getter-twice-c', query);
    expect(again.text.trim()).toBe(replayOf(first).trim());
    expect(await rows()).toBe(before + 1);
  });

  it('downloadUrl unselected: read once, and the replay is the first answer', async () => {
    const query = 'mutation { createUpload { id files { name thumbnailUrl } } }';
    const before = await rows();
    signatures = 0;
    const first = await post('adv76-mw-getter-twice-a', query);
    expect(first.body.errors).toBeUndefined();
    const signedAtFirst = signatures;
    const again = await post('adv76-mw-getter-twice-a', query);
    expect(await rows()).toBe(before + 1);
    // Fails: the replay's thumbnails carry the library's nonces, not the first answer's.
    expect(again.text.trim()).toBe(replayOf(first).trim());
    // Fails: 4 signatures for 2 files.
    expect(signedAtFirst).toBe(2);
  });
});
