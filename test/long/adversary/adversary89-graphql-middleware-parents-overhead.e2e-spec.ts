import { jest } from '@jest/globals';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Logger, Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 89 (graphql): a kept `@ResolveField()` parent inside a middleware output whose own
 * data (an unselected long column) takes the stored answer past `maxResponseBytes`. The guide
 * promises the parent's data is left out and the outputs stored; that holds where the answer
 * is over by at most the parent's JSON, but where it is over by a few bytes more (by less than
 * the parent's key and the `"parents"` wrapper that leaving it out also takes off), all
 * outputs are dropped instead: the replay answers `data: null` with `field_output_pending` at
 * `row`, though the answer without the parent (144 bytes) is well under the limit (153).
 *
 * User code: `@Field(() => Row, { middleware: [visible] }) row` on Order; `Row { seat; notes
 * (2000 characters, unselected) }`; `@ResolveField(() => Int) nextSeat(@Parent() row)`;
 * `@Idempotent({ maxResponseBytes })` on the mutation; Apollo on Express. The window is one
 * key's overhead per kept parent plus 13 bytes: with many parents (a list of rows, each one
 * kept: `"row.items.57":`) it is wide.
 *
 * Code path: lib/graphql/run-field.ts `completing`: `over = completed.body.length - max`;
 * lib/graphql/parents-within.ts `parentsWithin` counts only each parent's data
 * (`Buffer.byteLength(JSON.stringify(data))`), never its key nor the `,"parents":{}` wrapper,
 * and gives up (`left > 0`: undefined) when all parents' data is less than `over`; `completing`
 * then stores the answer with `outputsLost: true`.
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "where it would take the stored answer
 * past `maxResponseBytes` (an unselected large column), the largest parents' data is left
 * out, as little as brings the answer under the limit, the outputs are stored, and the app's
 * log says so".
 *
 * Severity: medium: no effect twice, but the replay of a committed order answers `data: null`
 * and `field_output_pending` where the guide promises the output stored (and it would fit).
 *
 * Fails now (unskip the it.skip and run this file): the replay is `{ data: null, errors: [{
 * extensions: { code: 'field_output_pending' }, path: ['placeB', 'row'] }] }`, and the log
 * says "the field middleware outputs of key ... are not stored" instead of the parents line.
 * Control (passes): over by exactly the parent's data (163): the parent left out, the output
 * stored and replayed, the log line said.
 *
 * Suggested fix: in `parentsWithin`, weigh each parent with its key (`"key":` and a comma) and
 * count the wrapper when all are left out; or simply re-encode and check after each parent
 * left out (largest first) until the answer fits.
 *
 * Fixed (session of 2026-12-06, third): lib/graphql/parents-within.ts `parentsWithin` weighs
 * each parent with its entry (`"key":`, its data, a comma) and, all of them left out, the
 * `,"parents":{}` member: the parent is left out and the outputs stored.
 */
let pool: Pool;

/**
 * The stored answer of `mutation { placeX { id row { seat nextSeat } } }` is 2193 bytes with
 * the kept parent's own data (2030 bytes of JSON, at `row`), 144 without it (measured in
 * review). Left out, that parent takes 2049 bytes off (its data and `,"parents":{"row":...}`).
 */
/** 2193 - 2030: over by exactly the parent's data. */
const FITS_BY_DATA = 163;
/** 2193 - 2040: over by more than the parent's data, less than the parent with its key. */
const FITS_BY_KEYS = 153;

/** Nest's field middleware: the row as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const row = (await next()) as Row;
  return { ...row };
};

@ObjectType()
class Row {
  @Field(() => Int)
  seat!: number;

  /** A long column no client selects here. */
  @Field()
  notes!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Row, { middleware: [visible] })
  row!: Row;
}

@Resolver(() => Row)
class RowResolver {
  @ResolveField(() => Int)
  nextSeat(@Parent() row: Row): number {
    return row.seat + 1;
  }
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent({ maxResponseBytes: FITS_BY_DATA })
  async placeA(): Promise<Order> {
    return placed();
  }

  @Mutation(() => Order)
  @Idempotent({ maxResponseBytes: FITS_BY_KEYS })
  async placeB(): Promise<Order> {
    return placed();
  }
}

async function placed(): Promise<Order> {
  await pool.query('INSERT INTO orders DEFAULT VALUES');
  return { id: 1, row: { seat: 7, notes: 'n'.repeat(2000) } };
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
  providers: [OrdersResolver, RowResolver],
})
class OrdersModule {}

describe('adversary 89: kept parents left out past maxResponseBytes, by a few bytes', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv89_gql_mw_parents_overhead', {
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

  const replayOf = async (key: string, field: string) => {
    const query = `mutation { ${field} { id row { seat nextSeat } } }`;
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const firstAnswer = await post(key, query);
      expect(firstAnswer.body).toEqual({
        data: { [field]: { id: 1, row: { seat: 7, nextSeat: 8 } } },
      });
      const again = await post(key, query);
      expect(again.body).toEqual({
        ...firstAnswer.body,
        extensions: { idempotency: { replayed: [field] } },
      });
      const said = warn.mock.calls.map((call) => String(call[0]));
      expect(said.some((line) => line.includes('the own data of the parents at row'))).toBe(true);
    } finally {
      warn.mockRestore();
    }
  };

  it('control: over by the parent’s data exactly: the parent left out, the output stored', async () => {
    await replayOf('adv89-overhead-data', 'placeA');
  });

  it('over by a few bytes more (the parent’s key): the parent left out, the output stored', async () => {
    await replayOf('adv89-overhead-keys', 'placeB');
  });
});
