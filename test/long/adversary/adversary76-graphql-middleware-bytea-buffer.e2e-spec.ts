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
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 76: a `bytea` column (node-postgres gives a `Buffer`) behind a `String` field's
 * middleware that writes it as a data URL (`buf.toString('base64')`) is answered right at the
 * first call and wrong on every replay: the stored input comes back a plain object (the
 * Buffer's JSON, `{ type: 'Buffer', data }`), whose `toString('base64')` is `[object Object]`.
 *
 * The user code (Apollo on Express):
 *
 *   const dataUrl: FieldMiddleware = async (_ctx, next) =>
 *     `data:image/png;base64,${((await next()) as Buffer).toString('base64')}`;
 *   @ObjectType() class Avatar {
 *     @Field(() => Int) id!: number;
 *     @Field(() => String, { middleware: [dataUrl] }) image!: Buffer;
 *   }
 *   @Mutation(() => Avatar) @Idempotent()
 *   async uploadAvatar(@Args('base64') base64: string) {
 *     return (await pool.query("INSERT INTO avatars (image) VALUES (decode($1, 'base64')) RETURNING id, image", [base64])).rows[0];
 *   }
 *
 * Why: `walkValue` (lib/graphql/wire-value.ts) walks the Buffer with `String`, whose
 * `serialize()` refuses the object Buffer's `toJSON()` gives, so `keepInput` keeps it as the
 * middleware's input; `keepData` (lib/graphql/kept-data.ts) does not give a Buffer back (its
 * comment says "a `Buffer` comes back a `Uint8Array`"; it comes back its JSON, a plain
 * object), a loss only logged. The replay's middleware calls `Object.prototype.toString`.
 *
 * What the docs promise (docs/guides/graphql.md): behind field middleware "the field itself
 * is stored as its middleware's input"; "a raw value the field's type does not take as it is
 * ... is kept as it is"; "on a replay it runs again on that stored input"; typed JSON keeps
 * what JSON would change ("a `Date` stays a `Date`, a Prisma model's `BigInt` column a
 * `BigInt`"); and a retry "gets the stored answer", the same bytes but for the replay marker.
 * A `bytea` column's value is node-postgres' plain data, as a `timestamptz`'s `Date` is.
 *
 * Control: the same middleware written `Buffer.from(value).toString('base64')` (which takes a
 * Buffer's JSON too): answered and replayed the same; the avatar row committed once.
 *
 * Severity: medium (every replay answers another value than the first answer, silently to the
 * client: an image data URL that is not one).
 *
 * Fails now: the replay's `image` is `"data:image/png;base64,[object Object]"`, the first
 * answer's `"data:image/png;base64,iVBORw=="`.
 *
 * Suggested fix: keep a `Buffer` as a `Buffer` in typed JSON (a custom superjson type for
 * `Buffer`, as the library keeps `Date`, `BigInt`, `Map`), or refuse it as not replayable at
 * the first answer.
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

/** Nest's field middleware: the image as a data URL. */
const dataUrl: FieldMiddleware = async (ctx, next) => {
  const image = (await next()) as Buffer;
  const lenient = (ctx.source as { lenient?: boolean }).lenient;
  // The control reads the bytes as a Buffer whatever the value's class.
  const base64 = lenient ? Buffer.from(image).toString('base64') : image.toString('base64');
  return `data:image/png;base64,${base64}`;
};

@ObjectType()
class Avatar {
  @Field(() => Int)
  id!: number;

  @Field(() => String, { middleware: [dataUrl] })
  image!: Buffer;

  lenient?: boolean;
}

@Resolver(() => Avatar)
class AvatarsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Avatar)
  @Idempotent()
  async uploadAvatar(
    @Args('base64') base64: string,
    @Args('lenient', { type: () => Boolean, defaultValue: false }) lenient: boolean,
  ): Promise<Avatar> {
    const { rows } = await pool.query<{ id: number; image: Buffer }>(
      "INSERT INTO avatars (image) VALUES (decode($1, 'base64')) RETURNING id, image",
      [base64],
    );
    return { ...rows[0], lenient };
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
  providers: [AvatarsResolver],
})
class AvatarsModule {}

describe('adversary 76: a bytea Buffer behind a String field middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_bytea', {
      module: AvatarsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE avatars (id serial PRIMARY KEY, image bytea NOT NULL)');
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

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['uploadAvatar'] } },
  });

  const count = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM avatars')).rows[0].n,
    );

  // The first bytes of a PNG.
  const image = 'data:image/png;base64,iVBORw==';

  it('control: the middleware reads the bytes with Buffer.from(), answered and replayed', async () => {
    const query = 'mutation { uploadAvatar(base64: "iVBORw==", lenient: true) { id image } }';
    const before = await count();
    const first = await post('adv76-mw-bytea-c', query);
    expect(first.body).toEqual({ data: { uploadAvatar: { id: expect.any(Number), image } } });
    const again = await post('adv76-mw-bytea-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('the middleware calls the Buffer’s toString(): answered, and replayed the same', async () => {
    const query = 'mutation { uploadAvatar(base64: "iVBORw==") { id image } }';
    const before = await count();
    const first = await post('adv76-mw-bytea-a', query);
    expect(first.body).toEqual({ data: { uploadAvatar: { id: expect.any(Number), image } } });
    const again = await post('adv76-mw-bytea-a', query);
    expect(await count()).toBe(before + 1);
    // Fails: "data:image/png;base64,[object Object]".
    expect(again.body).toEqual(replayOf(first));
  });
});
