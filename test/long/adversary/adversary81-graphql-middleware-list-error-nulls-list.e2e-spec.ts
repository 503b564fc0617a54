import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { ForbiddenException, Module } from '@nestjs/common';
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
 * Adversary 81 (graphql): a middleware that throws at one item of a Nest list (`[Line!]!`, the
 * default of `@Field(() => [Line])`) nulls the list and the mutation's answer at the first
 * call; its replay answers `field_not_stored` ("was not selected by the first call ... use a
 * new key") at the *other* items' middleware fields, in place of the first answer's
 * `ForbiddenException`.
 *
 * The app: `Order { id lines: [Line!]! }`, `Line { label: String! }`, `label` behind Nest's
 * field middleware `visible`, which throws `ForbiddenException` for a line the caller may not
 * see (Nest's own recipe for field-level authorization); `createOrder` with `@Idempotent()`;
 * Apollo on Express (the same on Mercurius, with and without `jit: 1`, probed: there the
 * replay answers `field_not_stored` at the other items and at a nullable middleware field
 * beside the list too). The order has a hidden line, at index 1.
 *
 * Why: the first answer's data is `createOrder: null` (the error at `lines.1.label` nulls
 * line 1, so the non-null list, so `createOrder`). `outputsIn` (lib/graphql/output-paths.ts)
 * stores an output for a path without a value only where an error is at or under it
 * (`isAtOrUnder(each.key, key)`): `lines.1.label` is stored (null, with its error), but
 * `lines.0.label` (and `lines.2.label`), which ran and were nulled from above, are not. On the
 * replay, item 0's `label` resolves first, `outputAt` answers `unstored`, and the wrapper
 * (lib/graphql/middleware-outputs.ts) throws `notStoredField`, which nulls the same parents
 * before item 1's stored error is reached.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "a field the first answer gave as null
 * with its error answers that error again where it was ...: the middleware's own (what it
 * threw, of its kind: a `ForbiddenException` is rendered `FORBIDDEN` with its status again)";
 * "A field the first call did not select is refused as any".
 *
 * Control (passes): the same list with nullable items (`nullable: 'items'`): only line 1 is
 * null, and the replay answers the same `FORBIDDEN` error there.
 *
 * Severity: high (with Nest's default list type, every replay of a call that met a hidden
 * item tells the client it selected other fields and to use a new key, which creates the
 * order again; the real error is gone).
 *
 * Fails now: the replay answers `createOrder: null` with `field_not_stored` at
 * `createOrder.lines.0.label`, not the `FORBIDDEN` error at `createOrder.lines.1.label`.
 *
 * Suggested fix: at the first answer, store every middleware field that ran and has no value
 * because an ancestor was nulled (by any error under the mutation) as "nulled from above";
 * on a replay, answer it null without an error of its own (or skip it), so that the stored
 * error nulls the same parents; never `unstored` for a path noted at the first answer.
 *
 * Fixed: the first answer stores each middleware field that ran but was nulled from above with the
 * key of the error that nulled its nearest null ancestor (`nulled`, `nullingError`,
 * lib/graphql/output-paths.ts); a replay throws that stored error again at its own place
 * (middleware-outputs.ts), which nulls the same ancestor.
 */
let pool: Pool;

/** Nest's field middleware: a hidden line is the caller's to see not. */
const visible: FieldMiddleware = async (_ctx, next) => {
  const label = (await next()) as string;
  if (label.startsWith('hidden')) throw new ForbiddenException('This line is not yours to see');
  return label;
};

@ObjectType()
class Line {
  @Field({ middleware: [visible] })
  label!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line])
  lines!: Line[];

  @Field(() => [Line], { nullable: 'items' })
  loose!: Line[];
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
    const lines = [{ label: 'pen' }, { label: 'hidden gift' }, { label: 'ink' }];
    return { id: rows[0].id, lines, loose: lines };
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
  providers: [OrdersResolver],
})
class OrdersModule {}

describe("adversary 81: a middleware's error at an item of a non-null list", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv81_gql_mw_list_nulls_list', {
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

  it('control: nullable items, the item null with its error again', async () => {
    const query = 'mutation { createOrder { id loose { label } } }';
    const first = await post('adv81-list-null-ok', query);
    expect(first.body.data.createOrder.loose).toEqual([{ label: 'pen' }, null, { label: 'ink' }]);
    expect(first.body.errors).toEqual([
      expect.objectContaining({
        path: ['createOrder', 'loose', 1, 'label'],
        extensions: expect.objectContaining({ code: 'FORBIDDEN' }),
      }),
    ]);
    const again = await post('adv81-list-null-ok', query);
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });

  it("Nest's default list: the FORBIDDEN error again, not field_not_stored", async () => {
    const query = 'mutation { createOrder { id lines { label } } }';
    const first = await post('adv81-list-null-mw', query);
    expect(first.body.data).toEqual({ createOrder: null });
    expect(first.body.errors).toEqual([
      expect.objectContaining({
        path: ['createOrder', 'lines', 1, 'label'],
        extensions: expect.objectContaining({ code: 'FORBIDDEN' }),
      }),
    ]);
    const again = await post('adv81-list-null-mw', query);
    // Fails: field_not_stored at createOrder.lines.0.label; the FORBIDDEN error is gone.
    expect(again.body).toEqual({ ...first.body, extensions: replayed });
  });
});
