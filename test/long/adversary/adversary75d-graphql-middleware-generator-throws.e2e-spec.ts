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
 * Adversary 75d: a list field behind field middleware whose value is a generator that throws
 * part-way (a bad row it parses) is answered as an empty list with no error at the first
 * call, and as an error ("Expected Iterable") on every replay. Without `@Idempotent()` the
 * same app answers the field null with the generator's error.
 *
 * The app: `Order { id lines: [Line!] }`, `lines` behind Nest's field middleware `audit`
 * (`const lines = await next(); log(); return lines`), the resolver returning `{ id, lines:
 * parseLines(rows) }` where `function* parseLines(rows) { for (const row of rows) { if
 * (row.qty < 0) throw new Error('bad line ' + row.sku); yield row; } }`; Apollo on Express.
 * The second row is bad.
 *
 * Why: round 75c (c4fe878) lets `fitsListType` (lib/graphql/middleware-input.ts) take a
 * one-shot iterator, so `walkValue` (lib/graphql/wire-value.ts) walks it with the list's type:
 * `materialized` -> `listOf` -> `Array.from(generator)` throws at the bad row, after reading
 * the first. The `catch (error) { if (!middleware) throw error; keepInput(); }` then keeps
 * the spent generator itself as the middleware's input (stored as an empty object), and gives
 * the first answer no replacement: GraphQL reads the resolver's own generator, now finished,
 * as `[]`, and the error is gone. A replay's middleware gets the stored `{}`, which GraphQL
 * refuses as no iterable.
 *
 * Expected (docs/guides/graphql.md): "A one-shot iterator (a `Map`'s `keys()`, a generator)
 * is no container the middleware maps: it is read once into an array, stored as a list, and
 * the first call's middleware is given that array"; a field's error is answered at its path
 * as GraphQL answers it and stored so (the page's "What is stored, and replayed"), and a
 * replay answers what the first call answered.
 *
 * Controls: the same mutation without `@Idempotent()` answers `lines: null` with the error
 * "bad line B"; a generator with no bad row behind the same middleware is answered and
 * replayed. Both pass.
 *
 * Severity: medium (a wrong first answer, an error silently turned into an empty list of an
 * order whose lines failed, and a replay that answers otherwise).
 *
 * Fails now: the first answer is `{ createOrder: { id, lines: [] } }` with no `errors` (the
 * assertion: expected `["bad line B"]`, received `[]`); the replay answers `lines: null` with
 * "Expected Iterable, but did not find one for field \"Order.lines\"."
 *
 * Suggested fix: on a one-shot iterator that throws while read, answer (and store) what
 * GraphQL would: the field's error at its path (or the whole mutation's, as for a field
 * without middleware), never keep the spent iterator; give the first answer what was read
 * and the error, never the spent iterator.
 * Fixed: lib/graphql/wire-value.ts `walkValue` reads a one-shot iterator behind middleware
 * (`materialized`) before walking it; one that throws part-way is the field's read error
 * (`failRead`: `FAILED` stored, a `FailedRead` for the first answer), never the spent iterator
 * kept.
 *
 * Broken again by round 78's output design (the answer hook stored the field's null output,
 * not its error: a replay answered null with no error), and fixed: `outputsIn`
 * (lib/graphql/output-paths.ts) keeps a middleware field's own error (graphql-js's, before
 * `formatError`: Apollo's request `errors`, Mercurius' `execution.errors`) beside its null
 * output, and the replay's wrapper (`answerOutputsOf`, middleware-outputs.ts) throws it again.
 */
let pool: Pool;

/** Lines the audit middleware saw, per call. */
const audited: unknown[] = [];

/** Nest's field middleware: an audit line per list answered. */
const audit: FieldMiddleware = async (_ctx, next) => {
  const lines: unknown = await next();
  audited.push(lines);
  return lines;
};

interface Row {
  sku: string;
  qty: number;
}

/** The order's lines as parsed from its rows; a bad row is an error. */
function* parseLines(rows: Row[]): Generator<Row> {
  for (const row of rows) {
    if (row.qty < 0) throw new Error(`bad line ${row.sku}`);
    yield row;
  }
}

@ObjectType()
class Line {
  @Field()
  sku!: string;

  @Field(() => Int)
  qty!: number;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line], { nullable: true, middleware: [audit] })
  lines?: Iterable<Line>;
}

async function createOrder(bad: boolean): Promise<Order> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO orders DEFAULT VALUES RETURNING id',
  );
  const lines: Row[] = [
    { sku: 'A', qty: 1 },
    { sku: 'B', qty: bad ? -1 : 2 },
    { sku: 'C', qty: 3 },
  ];
  return { id: rows[0].id, lines: parseLines(lines) };
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  createOrder(
    @Args('bad', { type: () => Boolean, defaultValue: true }) bad: boolean,
  ): Promise<Order> {
    return createOrder(bad);
  }

  /** The control: the same mutation without the library. */
  @Mutation(() => Order, { nullable: true })
  createOrderPlain(): Promise<Order> {
    return createOrder(true);
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

describe('adversary 75d: a generator behind list middleware that throws part-way', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75d_gql_mw_gen_throws', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
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

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createOrder'] } },
  });

  const messages = (body: { errors?: { message: string }[] }) =>
    (body.errors ?? []).map((error) => error.message);

  it('control: without @Idempotent(), the lines are null with the error', async () => {
    const first = await post(undefined, 'mutation { createOrderPlain { id lines { sku qty } } }');
    expect(first.body.data).toEqual({ createOrderPlain: { id: expect.any(Number), lines: null } });
    expect(messages(first.body)).toEqual(['bad line B']);
  });

  it('control: a generator with no bad row, answered and replayed', async () => {
    const query = 'mutation { createOrder(bad: false) { id lines { sku qty } } }';
    const first = await post('adv75d-mw-gen-ok', query);
    expect(first.body).toEqual({
      data: {
        createOrder: {
          id: expect.any(Number),
          lines: [
            { sku: 'A', qty: 1 },
            { sku: 'B', qty: 2 },
            { sku: 'C', qty: 3 },
          ],
        },
      },
    });
    const again = await post('adv75d-mw-gen-ok', query);
    expect(again.body).toEqual(replayOf(first));
  });

  it('the bad row: answered with its error, and replayed so', async () => {
    const query = 'mutation { createOrder { id lines { sku qty } } }';
    const first = await post('adv75d-mw-gen-bad', query);
    // Fails: the lines answered [], and no error.
    expect(messages(first.body)).toEqual(['bad line B']);
    const again = await post('adv75d-mw-gen-bad', query);
    expect(again.body).toEqual(replayOf(first));
  });
});
