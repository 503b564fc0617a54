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
import { type IncomingMessage } from 'node:http';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 76: a `Map` behind an object-typed field's middleware (a product's title in each
 * locale, the middleware picking the caller's) is stored as the object type walked over the
 * Map: every field null, the Map's entries gone. The first answer is right; every replay answers
 * the stored `{ locale: null, body: null }`, and the non-null `Text.locale` nulls the answer.
 *
 * The user code (Apollo on Express):
 *
 *   @ObjectType() class Text { @Field() locale!: string; @Field() body!: string; }
 *   const inLocale: FieldMiddleware = async (ctx, next) => {
 *     const texts = (await next()) as Map<string, Text>;
 *     const wanted = (ctx.context as { req: IncomingMessage }).req.headers['accept-language'] ?? 'en';
 *     return texts.get(wanted) ?? texts.get('en');
 *   };
 *   @ObjectType() class Product {
 *     @Field(() => Int) id!: number;
 *     @Field(() => Text, { middleware: [inLocale] }) title!: Map<string, Text>;
 *   }
 *   @Mutation(() => Product) @Idempotent() createProduct() {
 *     insert; return { id, title: new Map([['en', { locale: 'en', body: 'Anvil' }], ['fr', { locale: 'fr', body: 'Enclume' }]]) };
 *   }
 *
 * Why: `fitsListType` (lib/graphql/middleware-input.ts) is true for any value of a field that
 * is not a list, so `walkValue` (lib/graphql/wire-value.ts) walks the Map with the object type
 * `Text`: `locale` and `body` are not `in` the Map, so each is stored null, and nothing throws,
 * so `keepInput` (the middleware's input kept as it is) is never reached. The Map has no own
 * keys, so nothing of it is kept beside the fields either. A replay's `next()` reads that
 * object.
 *
 * What the docs promise (docs/guides/graphql.md, "What is stored, and replayed"): behind field
 * middleware "the field itself is stored as its middleware's input", and "a raw value the
 * field's type does not take as it is (... a jsonb record or a `Map` it maps to a list) is kept
 * as it is"; "on a replay it runs again on that stored input"; a retry gets the first answer.
 *
 * Control: the same titles as a plain record (`{ en: {...}, fr: {...} }`, `texts[wanted]`):
 * its own keys are kept beside the fields, answered and replayed the same.
 *
 * Severity: medium (the mutation committed once and answered; every replay an error, the
 * non-null field nulling the mutation's answer).
 *
 * Fails now: the replay is `{ data: null, errors: [ "Cannot return null for non-nullable field
 * Text.locale." at createProduct.title.locale ] }` where the first answer had the French title.
 *
 * Suggested fix: behind middleware keep the input as it is whenever the walk with the field's
 * type does not give it back (a `Map`, a `Set`, any object none of whose selected fields it
 * has), as for a list type that the value does not fit; not only when the walk throws.
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

@ObjectType()
class Text {
  @Field()
  locale!: string;

  @Field()
  body!: string;
}

type Titles = Map<string, Text> | Record<string, Text>;

/** Nest's field middleware: the title in the caller's locale, English when there is none. */
const inLocale: FieldMiddleware = async (ctx, next) => {
  const texts = (await next()) as Titles;
  const wanted = (ctx.context as { req: IncomingMessage }).req.headers['accept-language'] ?? 'en';
  if (texts instanceof Map) return texts.get(wanted) ?? texts.get('en');
  return texts[wanted] ?? texts.en;
};

@ObjectType()
class Product {
  @Field(() => Int)
  id!: number;

  @Field(() => Text, { middleware: [inLocale] })
  title!: Titles;
}

@Resolver(() => Product)
class ProductsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Product)
  @Idempotent()
  async createProduct(
    @Args('record', { type: () => Boolean, defaultValue: false }) record: boolean,
  ): Promise<Product> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO products DEFAULT VALUES RETURNING id',
    );
    const en = { locale: 'en', body: 'Anvil' };
    const fr = { locale: 'fr', body: 'Enclume' };
    // The control: the same titles as a plain record.
    const title: Titles = record
      ? { en, fr }
      : new Map([
          ['en', en],
          ['fr', fr],
        ]);
    return { id: rows[0].id, title };
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
  providers: [ProductsResolver],
})
class ProductsModule {}

describe('adversary 76: a Map behind an object field middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_map_object', {
      module: ProductsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE products (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Accept-Language', 'fr')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createProduct'] } },
  });

  const count = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM products')).rows[0].n,
    );

  const title = { locale: 'fr', body: 'Enclume' };

  it('control: the titles as a record, answered and replayed', async () => {
    const query = 'mutation { createProduct(record: true) { id title { locale body } } }';
    const before = await count();
    const first = await post('adv76-mw-map-object-c', query);
    expect(first.body).toEqual({ data: { createProduct: { id: expect.any(Number), title } } });
    const again = await post('adv76-mw-map-object-c', query);
    expect(again.body).toEqual(replayOf(first));
    expect(await count()).toBe(before + 1);
  });

  it('the titles as a Map: answered, and replayed the same', async () => {
    const query = 'mutation { createProduct { id title { locale body } } }';
    const before = await count();
    const first = await post('adv76-mw-map-object-a', query);
    expect(first.body).toEqual({ data: { createProduct: { id: expect.any(Number), title } } });
    const again = await post('adv76-mw-map-object-a', query);
    expect(await count()).toBe(before + 1);
    // Fails: data null, "Cannot return null for non-nullable field Text.locale.".
    expect(again.body).toEqual(replayOf(first));
  });
});
