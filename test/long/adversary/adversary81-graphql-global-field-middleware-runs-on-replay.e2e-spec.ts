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
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 81 (graphql): under Apollo, the global `buildSchemaOptions.fieldMiddleware` runs
 * again on every replay, on every field that has no `@Field({ middleware })` of its own: its
 * output is not stored, and it reads its input (the stored value) again. The docs name the
 * global `fieldMiddleware` beside `@Field({ middleware })` and say the middleware never runs
 * on a replay.
 *
 * The app: Nest's own recipe, a global `fieldMiddleware: [loggerMiddleware]` (a log line, a
 * metering or an audit record per field read; here a counter by field), in
 * `GraphQLModule.forRoot<ApolloDriverConfig>({ buildSchemaOptions: { fieldMiddleware } })`;
 * `Order { id note label }`, `label` with a `@Field({ middleware: [upper] })` too;
 * `createOrder` with `@Idempotent()`; Apollo on Express.
 *
 * Why: a field's middleware is told by its schema resolver's code (`schemaResolverKind`,
 * lib/graphql/resolver-kind.ts, Nest's `decorateFieldResolverWithMiddleware` wrapper), which
 * Apollo Server hides: it wraps every field's resolver for its plugins' `willResolveField`
 * (the default cache-control plugin has one), and that wrapper is `isApolloInstrumentation`,
 * so undefined; `fieldResolution` (lib/graphql/resolved-fields.ts) then reads only Nest's
 * per-field metadata (`nestField(...).middleware`), which has no global middleware: `note`
 * and `id` are `property`. `answerOutputsOf` (lib/graphql/middleware-outputs.ts) puts no
 * wrapper on them, so the replay runs Nest's resolver, with the global middleware, on the
 * stored value.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a field behind Nest field middleware
 * (`@Field({ middleware })`, or the global `buildSchemaOptions.fieldMiddleware`) is stored as
 * the operation's answer holds it ... and a replay answers that output: the middleware never
 * runs on a replay. Its input ... is read by the middleware alone, once".
 *
 * On Mercurius (no such wrapper) the same app holds: probed, the global middleware does not run
 * on the replay.
 *
 * Control (passes): `label`, whose own `@Field({ middleware })` is in Nest's metadata: neither
 * its middleware nor the global one runs on the replay.
 *
 * Severity: medium (each replay logs, meters or audits the fields again, as a new read; a
 * global middleware that formats by the request (a locale, a time zone, the caller's
 * permissions) answers a replay other than the first answer; a lazy input is read again).
 *
 * Failed (before the fix): the replay ran the global middleware once at `note` (and at `id`).
 *
 * Suggested fix: see through Apollo Server's instrumentation wrapper to the resolver it wraps
 * (Apollo keeps it on the field as `symbolUserFieldResolver`), or tell the global middleware
 * from the GraphQL module's options (`buildSchemaOptions.fieldMiddleware` non-empty: every
 * field Nest builds without a resolver of the app's is a middleware field).
 *
 * Fixed: the library's Apollo plugin notes each field's own resolver when Apollo Server starts
 * (`serverWillStart`, `noteOwnResolvers`, lib/graphql/resolver-kind.ts), before Apollo wraps
 * them at its first operation (the wrapper keeps the field's resolver in its closure, not on the
 * field as the suggestion thought); `fieldResolution` (lib/graphql/resolved-fields.ts) reads the
 * kind of that resolver behind Apollo's wrapper (`fieldResolverKind`), so Nest's middleware
 * wrapper of the global `fieldMiddleware` is told as on Mercurius; commit "graphql: see through
 * Apollo Server's resolver wrapper to tell the global field middleware".
 */
let pool: Pool;

/** The runs of the global middleware, by field. */
const runs = new Map<string, number>();

/** Nest's recipe: a global middleware that logs each field's value (here, counts it). */
const loggerMiddleware: FieldMiddleware = async (ctx, next) => {
  const value: unknown = await next();
  const field = ctx.info?.fieldName ?? '';
  runs.set(field, (runs.get(field) ?? 0) + 1);
  return value;
};

/** A field's own middleware: the text in capitals. */
const upper: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string;
  return value.toUpperCase();
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field()
  note!: string;

  @Field({ middleware: [upper] })
  label!: string;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, note: 'leave at door', label: 'gift' };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      buildSchemaOptions: { fieldMiddleware: [loggerMiddleware] },
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 81: the global fieldMiddleware on a replay', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_global_mw', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
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

  const replayed = { idempotency: { replayed: ['createOrder'] } };

  it('control: a field with its own middleware, not run on the replay', async () => {
    const query = 'mutation { createOrder { label } }';
    const first = await post('adv81-global-label', query);
    expect(first.body).toEqual({ data: { createOrder: { label: 'GIFT' } } });
    const before = runs.get('label');
    const again = await post('adv81-global-label', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
    expect(runs.get('label')).toBe(before);
  });

  it('a field under the global middleware alone, not run on the replay', async () => {
    const query = 'mutation { createOrder { note } }';
    const first = await post('adv81-global-note', query);
    expect(first.body).toEqual({ data: { createOrder: { note: 'leave at door' } } });
    const before = runs.get('note');
    expect(before).toBeGreaterThan(0);
    const again = await post('adv81-global-note', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
    expect(runs.get('note')).toBe(before);
  });
});
