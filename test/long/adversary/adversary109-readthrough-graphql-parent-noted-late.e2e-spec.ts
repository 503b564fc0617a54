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
 * Fixed (session of 2026-12-07, third): a parent is written into its answer's one graph when
 * it is noted, before its first resolver runs (app-parents.ts `notedParent` -> kept-data.ts
 * `keeper`, one per answer, by the record its parents are noted in), never at the answer;
 * `keptParents` then stores only what the parents the answer keeps reach (parent-graph.ts
 * `graphReachedBy`). A resolver's later in-place change (`l.tags.sort()`) is not kept: a
 * replay's resolvers read the data the first call's read, and change it again. Still one
 * shared graph per answer (adversary 107's size guard).
 *
 * Adversary 109 (read-through of 1c704b3..4414a50): the parents of app-resolved fields inside
 * a field middleware's output are now noted as a SHALLOW copy when their first field resolves
 * (app-parents.ts `notedParent`) and written into the outputs' graph only when the answer is
 * stored (run-field.ts `completing` -> `keptParents`). Before, `keptParent` wrote them (typed
 * JSON) at that very moment. So what a resolver does to its parent's nested data after that
 * (an in-place `Array.prototype.sort()`, the usual JS pitfall) is what is kept: a replay's
 * resolvers read the data as it was after the first call, not as the first call's read it,
 * and the replay answers other values than the first answer.
 *
 * User code: `@ObjectType() Order { id; @Field(() => [Line], { middleware: [audit] }) lines }`
 * (`audit` an ordinary FieldMiddleware returning `next()`), `@ObjectType() Line { id }` (its
 * `tags` no field); `@ResolveField() firstTag(@Parent() l) { return l.tags[0] }` and
 * `@ResolveField() sortedTags(@Parent() l) { return l.tags.sort() }` (in place), selected as
 * `lines { id firstTag sortedTags }`; `@Mutation() @Idempotent() placeOrder`; Apollo.
 *
 * Code path: lib/graphql/middleware-outputs.ts `keepAppParentsOf` -> output-paths.ts
 * `noteAppParent(…, () => notedParent(source, type))` (a shallow copy: `tags` the same
 * array) -> run-field.ts `completing` -> app-parents.ts `keptParents` (written now, after
 * `sortedTags` sorted it) -> replay: middleware-outputs.ts `outputValue` `parentData(kept,
 * read)`.
 *
 * Docs quote: output-paths.ts `StoredOutputs.parents`: "a replay's rebuilt parent holds it
 * again, so that the resolver, which runs again, reads what it read at the first answer
 * (adversary 81)"; docs/guides/graphql.md: "A replay's resolvers get the same values as the
 * first call's, and the answer is the same bytes".
 *
 * Severity: high (a replay answers another value than the first answer: `firstTag` "b" then
 * "a").
 *
 * Fails now: (un-skipped) the replay's `firstTag` is "a" where the first answer's was "b". A
 * regression of this change: the same file passes on 1c704b3 (both cases).
 *
 * Controls: the same app without the in-place sort (`[...l.tags].sort()`): the replay is the
 * same data.
 *
 * Suggested fix: note the parent's data as it is when noted (write its typed graph then, or
 * take a deep structured copy of its own data at `notedParent`, then write all the copies
 * into one graph at the answer).
 */
let pool: Pool;

const audit: FieldMiddleware = async (_ctx, next) => next();

@ObjectType()
class Line {
  @Field(() => Int)
  id!: number;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [Line], { middleware: [audit] })
  lines!: Line[];
}

type LineRow = Line & { tags: string[] };

@Resolver(() => Line)
class LinesResolver {
  @ResolveField(() => String)
  firstTag(@Parent() line: LineRow): string {
    return line.tags[0];
  }

  @ResolveField(() => [String])
  sortedTags(@Parent() line: LineRow): string[] {
    // In place for line 1 (the pitfall); a copy otherwise (the control).
    return line.id === 1 ? line.tags.sort() : [...line.tags].sort();
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
  async placeOrder(@Args('lineId', { type: () => Int }) lineId: number): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const line: LineRow = { id: lineId, tags: ['b', 'a'] };
    return { id: rows[0].id, lines: [line] };
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
  providers: [OrdersResolver, LinesResolver],
})
class OrdersModule {}

describe('adversary 109 read-through: a middleware output parent noted shallow, written late', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv109_gql_parent_noted_late', {
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
      .timeout(60_000)
      .send(JSON.stringify({ query }));

  const query = (lineId: number) =>
    `mutation { placeOrder(lineId: ${lineId}) { lines { id firstTag sortedTags } } }`;

  /** Waits until the stored answer holds its middleware outputs (no longer pending). */
  const stored = async (): Promise<void> => {
    for (let tries = 0; tries < 50; tries += 1) {
      const { rows } = await fixture.admin.query<{ body: string }>(
        `SELECT convert_from(response_body, 'UTF8') AS body
           FROM idempotency_keys ORDER BY created_at DESC LIMIT 1`,
      );
      if (rows[0] && !rows[0].body.includes('"pending":true')) return;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  };

  const firstAndReplay = async (key: string, lineId: number) => {
    const first = await post(key, query(lineId));
    expect(first.body.errors).toBeUndefined();
    await stored();
    const again = await post(key, query(lineId));
    const body = again.body as { data?: unknown; errors?: unknown };
    return { first: first.body as unknown, again: { data: body.data, errors: body.errors } };
  };

  it('control: a resolver that sorts a copy: the replay is the same data', async () => {
    const { first, again } = await firstAndReplay('adv109-noted-late-copy', 2);
    expect(first).toEqual({
      data: { placeOrder: { lines: [{ id: 2, firstTag: 'b', sortedTags: ['a', 'b'] }] } },
    });
    expect(again).toEqual({ ...(first as object), errors: undefined });
  });

  it('a resolver that sorts its parent data in place: the replay is the same data', async () => {
    const { first, again } = await firstAndReplay('adv109-noted-late-in-place', 1);
    expect(first).toEqual({
      data: { placeOrder: { lines: [{ id: 1, firstTag: 'b', sortedTags: ['a', 'b'] }] } },
    });
    expect(again).toEqual({ ...(first as object), errors: undefined });
  });
});
