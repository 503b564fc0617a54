import { jest } from '@jest/globals';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Logger, Module } from '@nestjs/common';
import {
  Args,
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
 * Fixed (session of 2026-12-06, seventh): kept data is written and read as a flat typed graph by a
 * loop over a queue (lib/graphql/typed-graph.ts), never a recursive walk: a tree of any depth is
 * kept; superjson now only reads records stored before.
 *
 * Adversary 103 (graphql): a parent's own data that is no field (kept for the app's
 * `@ResolveField()`s under `__parent`) nested some 2,600 levels deep (a comment thread, a
 * category tree loaded whole) is dropped from the stored answer: the first call's field
 * resolver reads the tree (`depth: 3000`), every replay's reads nothing there (`depth: 0`),
 * and the replay answers another value for a committed mutation. Plain JSON (what the data
 * is: objects of numbers) writes and reads this tree back (`JSON.stringify` handles it, and
 * so does the same app without the library); the library's typed copy overflows the stack,
 * takes that for "no JSON form" and leaves the member out.
 *
 * User code: `@ObjectType() class Thread { @Field(() => Int) id }`; `@Mutation(() => Thread)
 * @Idempotent() createThread(@Args('n') n)` inserting a row and returning `{ id, tree:
 * nested(n) }` (`{ c: { c: ... { leaf: 1 } } }`, `tree` is no field); `@ResolveField(() =>
 * Int) depth(@Parent() t)` counting `t.tree`'s levels; Apollo.
 *
 * Code path: lib/graphql/kept-data.ts `keepData`: `write(plain)` (superjson's recursive walk,
 * plus `plainCopy`/`escapedCopy`) throws `RangeError: Maximum call stack size exceeded`, taken
 * for "a cycle through a toJSON()" by its `catch`; each member is then tried alone, `tree`
 * fails again and is `left` out (named unfaithful "with no JSON form"), and
 * lib/graphql/wire-value.ts `fromWire` rebuilds the parent without it.
 *
 * Docs (docs/guides/graphql.md, "What the resolvers under it read, as they first read it"):
 * "Its own data that is not a field ... is kept too, under `__parent` (below), with its types";
 * "A replay's resolvers get the same values as the first call's, and the answer is the same
 * bytes"; what may be lost is stated as "a function, a stream, or a field's value that neither
 * its scalar nor typed JSON gives back" (plain nested objects are neither), or data past
 * `maxResponseBytes` (this tree is ~20 KB).
 *
 * Severity: medium (a committed mutation's replay answers another value at a field resolver's
 * field, every time; the effect is not repeated). The app's log says, once: "its data tree
 * (an object with no JSON form) does not come back as it was ... Keep what they read to plain
 * data, Dates, ...": it is plain data, and it has a JSON form, so the advice cannot be
 * followed and the stated cause is wrong.
 *
 * Fails now (unskip the it.skip): first `{"data":{"createThread":{"id":2,"depth":3000}}}`;
 * every replay `{"data":{"createThread":{"id":2,"depth":0}},"extensions":{"idempotency":
 * {"replayed":["createThread"]}}}`.
 * Control (passes): a 1,000-deep tree replays `depth: 1000`.
 *
 * Suggested fix: keep data superjson cannot walk (a `RangeError`) as plain JSON when
 * `JSON.stringify` gives it back exactly (objects, arrays, strings, finite numbers, booleans,
 * null), or walk with an explicit stack; never take a `RangeError` for "no JSON form"; if it
 * must be dropped, say so in the docs with the depth.
 */
let pool: Pool;

function nested(n: number): unknown {
  let value: unknown = { leaf: 1 };
  for (let i = 0; i < n; i += 1) value = { c: value };
  return value;
}

@ObjectType()
class Thread {
  @Field(() => Int)
  id!: number;
}

interface ThreadRow extends Thread {
  tree: unknown;
}

@Resolver(() => Thread)
class ThreadsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Thread)
  @Idempotent()
  async createThread(@Args('n', { type: () => Int }) n: number): Promise<ThreadRow> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO threads DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, tree: nested(n) };
  }

  @ResolveField(() => Int)
  depth(@Parent() thread: ThreadRow): number {
    let levels = 0;
    let node = thread.tree as { c?: unknown } | undefined;
    while (node && typeof node === 'object' && 'c' in node) {
      node = node.c as { c?: unknown };
      levels += 1;
    }
    return levels;
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
  providers: [ThreadsResolver],
})
class ThreadsModule {}

describe('adversary 103: a deep tree in a parent s own data', () => {
  let fixture: PoolApp;
  const logged: string[] = [];

  beforeAll(async () => {
    for (const level of ['warn', 'log', 'error'] as const) {
      jest.spyOn(Logger.prototype, level).mockImplementation((message: unknown) => {
        logged.push(String(message));
      });
    }
    fixture = await startPoolApp('adv103_gql_deep_parent', {
      module: ThreadsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE threads (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const count = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM threads')).rows[0].n;

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  it('control: a 1,000-deep tree replays the same depth', async () => {
    const query = 'mutation { createThread(n: 1000) { id depth } }';
    const firstAnswer = await post('adv103-deep-parent-1000', query);
    const again = await post('adv103-deep-parent-1000', query);
    expect(firstAnswer.body.data.createThread.depth).toBe(1000);
    expect(again.body.data).toEqual(firstAnswer.body.data);
  });

  it('the replay reads the 3,000-deep tree the first call read', async () => {
    const query = 'mutation { createThread(n: 3000) { id depth } }';
    const before = await count();
    const firstAnswer = await post('adv103-deep-parent-3000', query);
    const again = await post('adv103-deep-parent-3000', query);
    // eslint-disable-next-line no-console
    console.log(
      'DEEP PARENT',
      firstAnswer.text,
      again.text,
      JSON.stringify(logged.filter((m) => /tree|Thread/.test(m))),
    );
    expect(firstAnswer.body.data.createThread.depth).toBe(3000);
    expect(again.body.data).toEqual(firstAnswer.body.data);
    expect(await count()).toBe(before + 1);
  });
});
