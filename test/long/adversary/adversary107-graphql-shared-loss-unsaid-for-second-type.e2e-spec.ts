import { jest } from '@jest/globals';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Logger, Module } from '@nestjs/common';
import {
  Field,
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
 * Adversary 107 (graphql): since round 106 all the parents of one answer are written into one
 * graph (kept-data.ts `keepAll` -> typed-graph.ts `writeGraphs`), and "a loss in an object two
 * of them share is named under the first one's member that reaches it": only the FIRST parent
 * is told. wire-value.ts `writeParents` says losses per parent, by its type; so where the
 * parents sharing the object are of two types (an order's `lines` and its `refunds`, both
 * pointing at the one `customer` entity, whose `displayName` is a getter of its class), the
 * log names the loss for `Line` only. A replay's `Refund.customerName` reads `undefined` (the
 * customer comes back plain) and answers null, and nothing in the log ever said that
 * `Refund`'s data does not come back as it was. Before round 106 (a graph per parent) each
 * type was told.
 *
 * User code: `class Customer { constructor(first, last) {} get displayName() }` (an entity);
 * `@ObjectType() Line { id }`, `@ObjectType() Refund { id }`, `@ObjectType() Order { id;
 * lines: [Line]; refunds: [Refund] }`; `@ResolveField(() => String, { nullable: true })
 * customerName(@Parent() x) { return x.customer.displayName }` on both; `@Mutation(() => Order)
 * @Idempotent() placeOrder()` whose lines and refunds share one `Customer`; Apollo.
 *
 * Code path: lib/graphql/typed-graph.ts `writeGraphs` (`notes(index)` of the root that first
 * reaches a node) -> kept-data.ts `keepAll` (`unfaithful[i]` empty for the second root) ->
 * wire-value.ts `writeParents` (losses by each parent's own type) -> replay-loss.ts
 * `warnLosses`.
 *
 * Docs quote (docs/guides/graphql.md): what a replay cannot give back as it was "is stored as
 * it can be, and said once ... the app's log says so once per type, with what is lost, at the
 * first answer".
 *
 * Severity: low (the replay's answer differs as documented for a class instance; what is
 * missing is the log line for the second type, which the docs promise).
 *
 * Fails now (un-skipped): the log says "Line ... customer (an instance of Customer)" and
 * nothing for `Refund`; the replay answers `customerName: null` under `refunds`.
 *
 * Controls: the loss is said for `Line` (the first type to reach the customer).
 *
 * Suggested fix: in `writeGraphs`/`keepAll`, note a loss for every root that reaches the node
 * holding it (keep, per node, its losses, and add them to each root that references the node,
 * by the member it is reached from), not only the first; at least once per type.
 *
 * Fixed (session of 2026-12-07): typed-graph.ts's writer notes, by node, where a loss was
 * written; a member that reaches a node written before it (by another root or member) is told
 * the loss too where that node holds one or reaches one (`reachesLoss`, each node walked once),
 * so `keepAll` names it for every parent, and `writeParents` says it for each type.
 */
let pool: Pool;

class Customer {
  constructor(
    readonly first: string,
    readonly last: string,
  ) {}

  get displayName(): string {
    return `${this.first} ${this.last}`;
  }
}

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;
}

@ObjectType()
class Refund {
  @Field(() => Int)
  id!: number;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line])
  lines!: Line[];

  @Field(() => [Refund])
  refunds!: Refund[];
}

type WithCustomer = { id: number; customer: Customer };

@Resolver(() => Line)
class LinesResolver {
  @ResolveField(() => String, { nullable: true })
  customerName(@Parent() line: WithCustomer): string | undefined {
    return line.customer.displayName;
  }
}

@Resolver(() => Refund)
class RefundsResolver {
  @ResolveField(() => String, { nullable: true })
  customerName(@Parent() refund: WithCustomer): string | undefined {
    return refund.customer.displayName;
  }
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async placeOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const customer = new Customer('Ada', 'Lovelace');
    return {
      id: rows[0].id,
      lines: [{ id: 1, customer } as WithCustomer],
      refunds: [{ id: 1, customer } as WithCustomer],
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
  providers: [OrdersResolver, LinesResolver, RefundsResolver],
})
class OrdersModule {}

describe('adversary 107: a loss in a shared object said for the first type only', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv107_gql_shared_loss', {
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

  const query =
    'mutation { placeOrder { id lines { id customerName } refunds { id customerName } } }';

  /** The warnings said about `type`'s data while the key is answered twice. */
  const run = async (key: string) => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const first = await post(key, query);
      const again = await post(key, query);
      const said = warn.mock.calls.map((call) => String(call[0]));
      // eslint-disable-next-line no-console
      console.log('LOSS', first.text, again.text, said);
      expect(first.body.data.placeOrder.refunds[0].customerName).toBe('Ada Lovelace');
      return { said, again: again.body };
    } finally {
      warn.mockRestore();
    }
  };

  /** One key answered twice, shared by both cases: the log says a loss once per process. */
  let ran: ReturnType<typeof run> | undefined;
  const once = () => (ran ??= run('adv107-shared-loss'));

  const saysFor = (said: string[], type: string) =>
    said.some(
      (line) =>
        line.includes(`value of type ${type} cannot be replayed as it was`) &&
        line.includes('customer (an instance of Customer)'),
    );

  it('control: the loss is said for Line, the first type to reach the customer', async () => {
    const { said } = await once();
    expect(saysFor(said, 'Line')).toBe(true);
  });

  it('the loss is said for Refund too, or Refund replays its customer name', async () => {
    const { said, again } = await once();
    const replayed = again.data?.placeOrder?.refunds?.[0]?.customerName;
    expect(saysFor(said, 'Refund') || replayed === 'Ada Lovelace').toBe(true);
  });
});
