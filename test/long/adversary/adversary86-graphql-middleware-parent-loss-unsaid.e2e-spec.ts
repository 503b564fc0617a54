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
 * Adversary 86 (graphql): a `@ResolveField()` whose parent sits inside a field-middleware
 * output reads a member that is an instance of a class with methods and a `toJSON()` (a
 * `Decimal`-like `Money`: `price.times(1.2).toFixed(2)`). The replay's parent has it as what
 * `toJSON()` wrote (a string), the resolver throws, and the replay answers `priceWithTax: null`
 * with an error where the first answer said `"24.00"` (the non-null field nulls the whole `data`): the library's docs accept that loss
 * for the mutation's own value but promise the app's log says so at the first answer; for the
 * kept parent nothing is said, so the app cannot know its replays differ.
 *
 * User code: `Order.product: Product` behind Nest's field middleware `visible`; `Product.price`
 * a `Money` (not in the schema); `@ResolveField() priceWithTax(@Parent() p)`; `createOrder`
 * with `@Idempotent()`; Apollo on Express.
 *
 * Code path: lib/graphql/app-parents.ts `keptParent` calls `keepData(data)` and keeps only
 * `.kept`, dropping `.unfaithful` (the members that do not come back as they were), where
 * lib/graphql/wire-value.ts pushes them to `losses` for `warnLosses` (replay-loss.ts).
 *
 * Docs (docs/guides/graphql.md): the kept parent is "kept then: its plain data properties,
 * typed, as for the mutation's own value"; for that value: "what a class has more (its methods
 * and getters, a `toJSON()` that is written instead, as for a `Decimal`) ... are not there as
 * they were on a replay ... and the app's log says so once per type, with what is lost, at the
 * first answer: `an idempotent mutation's value of type Voucher cannot be replayed as it
 * was: ...`".
 *
 * Severity: low-medium: the replay answers differently (an error instead of a price) and the
 * log that would tell the app so is missing.
 *
 * Fails now: no "cannot be replayed as it was" line is logged at the first answer; and the
 * replay (seen in review) answers `{ data: null, errors: ["product.price.times is not a
 * function" at createOrder.product.priceWithTax] }` (the non-null field nulls the order). Control (passes): the same `Money`
 * on the mutation's own value (`Order.total`, read by `@ResolveField() totalWithTax`): logged.
 *
 * Suggested fix: in `keptParent`, pass `keepData(...).unfaithful` to the same `losses` the
 * mutation's value reports (`warnLosses`), naming the parent's type.
 *
 * Fixed (session of 2026-12-06, third): `keptParent` (lib/graphql/app-parents.ts) returns the
 * kept data with its `unfaithful` members, and `parentLosses` words them as the mutation's own
 * value does (`its data price (an instance of Money) does not come back as it was`, with the
 * parent's type); the app field's wrapper (lib/graphql/middleware-outputs.ts) hands them to
 * `noteAppParent` (lib/graphql/output-paths.ts), which tells the first answer's `warn`, given
 * to `awaitOutputs` by lib/graphql/run-field.ts as `warnLosses(tools.logger, ...)`: said once
 * per type at the first answer. The replay still answers the error (the loss the docs accept),
 * now said. Specs: app-parents.spec.ts (`parentLosses`), output-paths.spec.ts.
 * Docs: docs/guides/graphql.md, "Field middleware".
 */
let pool: Pool;

/** A Decimal-like money value: methods, and a `toJSON()` that writes its digits. */
class Money {
  constructor(private readonly cents: number) {}
  times(factor: number): Money {
    return new Money(Math.round(this.cents * factor));
  }
  toFixed(digits: number): string {
    return (this.cents / 100).toFixed(digits);
  }
  toJSON(): string {
    return this.toFixed(2);
  }
}

/** Nest's field middleware: the product as the caller may see it (here: as given). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const product = (await next()) as Product;
  return { ...product };
};

@ObjectType()
class Product {
  @Field()
  name!: string;

  price?: Money;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Product, { middleware: [visible] })
  product!: Product;

  total?: Money;
}

@Resolver(() => Product)
class ProductResolver {
  @ResolveField(() => String)
  priceWithTax(@Parent() product: Product): string {
    return product.price!.times(1.2).toFixed(2);
  }
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @ResolveField(() => String)
  totalWithTax(@Parent() order: Order): string {
    return order.total!.times(1.2).toFixed(2);
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return {
      id: rows[0].id,
      product: { name: 'Lamp', price: new Money(2000) },
      total: new Money(2000),
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
  providers: [OrdersResolver, ProductResolver],
})
class OrdersModule {}

describe('adversary 86: an app field under a middleware output, its parent with a Decimal-like member', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv86_gql_mw_parent_loss', {
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

  const told = (calls: unknown[][], type: string) =>
    calls.some((args) =>
      args.some(
        (arg) =>
          typeof arg === 'string' &&
          arg.includes(`value of type ${type} cannot be replayed as it was`),
      ),
    );

  it('control: the Money on the mutation own value: said in the log at the first answer', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const answer = await post('adv86-loss-own', 'mutation { createOrder { id totalWithTax } }');
      expect(answer.body.data.createOrder.totalWithTax).toBe('24.00');
      expect(told(warn.mock.calls, 'Order')).toBe(true);
    } finally {
      warn.mockRestore();
    }
  });

  it('the Money on a kept parent inside a middleware output: said in the log at the first answer', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const answer = await post(
        'adv86-loss-parent',
        'mutation { createOrder { id product { name priceWithTax } } }',
      );
      expect(answer.body.data.createOrder.product.priceWithTax).toBe('24.00');
      expect(told(warn.mock.calls, 'Product')).toBe(true);
    } finally {
      warn.mockRestore();
    }
  });
});
