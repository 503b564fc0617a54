import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  Float,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 82 (graphql): a middleware field whose parent a sibling's error nulled at the first
 * answer (adversary 81's fix: the replay answers that sibling's error again) is refused with
 * `field_not_stored` ("was not selected by the first call ... use a new key") once the retry
 * names it, or its parent, under another alias: `meta { l: label rate }` or `m: meta { label
 * rate }` after `meta { label rate }`. The sibling's error is gone from the answer.
 *
 * The app (adversary 81's): `Order.meta: Meta` (nullable), `Meta.label` behind Nest's field
 * middleware `upper`, `Meta.rate: Float!` a `@ResolveField()` whose rates service is down;
 * `createOrder` with `@Idempotent()`; Apollo on Express. A client retries with its aliases
 * changed (a new app version, a code generator's aliases), which the docs allow.
 *
 * Why: the middleware fields nulled from above are stored by the first answer's response-key
 * path (`nulled`, 'meta.label'), and `outputAt` looks them up by the retry's response-key path
 * (`nulled?.[key]`, lib/graphql/output-paths.ts:455), never by the named key, as it does the
 * outputs (`storedKeyFor`). With another alias, `key` is 'meta.l' or 'm.label': no mark, no
 * output, so `unstored` (output-paths.ts:459). Where it is found, the error is thrown at the
 * first answer's path (`[...replay.root, ...keySteps(by)]`, output-paths.ts:457), not at the
 * retry's (`createOrder.m.rate`).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "A middleware field that ran but has no
 * value in the first answer, an ancestor nulled by an error elsewhere (a sibling's ...),
 * answers that error again, at its own place: it nulls the same ancestor ... A retry that
 * selects such a field under another alias (or without the first call's alias) gets the
 * first call's output of it: outputs ... are found by their fields' names and arguments
 * first".
 *
 * Control (passes): the same operation again.
 *
 * Severity: medium (the retry of a committed order is told a field it selected the first
 * time was never selected and to use a new key, and the real error, the rates service's, is
 * lost; the data is the same: `meta: null`).
 *
 * Fails now: both retries answer only `field_not_stored` at `createOrder.meta.l` /
 * `createOrder.m.label`.
 *
 * Suggested fix: store `nulled` (and the errors a replay throws again) by named key too, and
 * look them up as the outputs are (named key first, then response key); throw the stored error
 * at the retry's own path of the field it names (the sibling's place, by its named key, in
 * the retry's operation), not the first answer's response keys.
 *
 * Fixed: the answer hook stores the nulled middleware fields by their named keys too (`names`,
 * lib/graphql/output-paths.ts `outputsIn`); a replay finds the nulled field as an output is,
 * named key first (`nulledKeyFor`), and throws the stored error under the ancestor the two
 * share at the retry's own path of it (`nullingPath`): `createOrder.m.rate` for `m: meta`.
 */
let pool: Pool;

/** Nest's field middleware: the text in capitals. */
const upper: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as string | null;
  return value === null ? null : value.toUpperCase();
};

@ObjectType()
class Meta {
  @Field({ middleware: [upper] })
  label!: string;

  @Field(() => Float)
  rate!: number;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Meta, { nullable: true })
  meta?: Meta;
}

@Resolver(() => Meta)
class MetaResolver {
  /** The rates service, down. */
  @ResolveField(() => Float)
  rate(): number {
    throw new Error('rates service unavailable');
  }
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
    return { id: rows[0].id, meta: { label: 'gift', rate: 0 } };
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
  providers: [OrdersResolver, MetaResolver],
})
class OrdersModule {}

describe("adversary 82: a sibling nulled a middleware field's parent; the retry under aliases", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv82_gql_mw_nulled_alias', {
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
  const ratesError = (path: (string | number)[]) => [
    expect.objectContaining({ message: 'rates service unavailable', path }),
  ];

  it('control: the same operation again', async () => {
    const query = 'mutation { createOrder { id meta { label rate } } }';
    const first = await post('adv82-nulled-ok', query);
    expect(first.body.errors).toEqual(ratesError(['createOrder', 'meta', 'rate']));
    const again = await post('adv82-nulled-ok', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });

  it("the middleware field under an alias: the sibling's error again", async () => {
    const first = await post(
      'adv82-nulled-l',
      'mutation { createOrder { id meta { label rate } } }',
    );
    expect(first.body.errors).toEqual(ratesError(['createOrder', 'meta', 'rate']));
    const again = await post(
      'adv82-nulled-l',
      'mutation { createOrder { id meta { l: label rate } } }',
    );
    // Fails: only field_not_stored at createOrder.meta.l.
    expect(again.body.data).toEqual(first.body.data);
    expect(again.body.errors).toEqual(ratesError(['createOrder', 'meta', 'rate']));
  });

  it("the parent under an alias: the sibling's error again, at the retry's path", async () => {
    const first = await post(
      'adv82-nulled-m',
      'mutation { createOrder { id meta { label rate } } }',
    );
    expect(first.body.errors).toEqual(ratesError(['createOrder', 'meta', 'rate']));
    const again = await post(
      'adv82-nulled-m',
      'mutation { createOrder { id m: meta { label rate } } }',
    );
    // Fails: only field_not_stored at createOrder.m.label.
    expect(again.body.data).toEqual({
      createOrder: { id: first.body.data.createOrder.id, m: null },
    });
    expect(again.body.errors).toEqual(ratesError(['createOrder', 'm', 'rate']));
  });
});
