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
 * Adversary 76: a list field whose middleware keeps the first five of a long list (the top
 * five matches of a search run by the mutation) answers five items, but the library stores the
 * middleware's whole input, every item's selected fields, and counts it against
 * `maxResponseBytes`: a 20 000-row input makes the stored answer 2 MB, past the default 1 MiB,
 * so the mutation rolls back and `response_too_large` is the key's answer for good, where the
 * app answers its five matches without the library.
 *
 * The user code (Apollo on Express):
 *
 *   const topFive: FieldMiddleware = async (_ctx, next) => ((await next()) as Match[]).slice(0, 5);
 *   @ObjectType() class Search {
 *     @Field(() => Int) id!: number;
 *     @Field(() => [Match], { middleware: [topFive] }) matches!: Match[];
 *   }
 *   @Mutation(() => Search) @Idempotent() runSearch() {
 *     insert the search; return { id, matches: (await pool.query('SELECT ... ORDER BY score DESC')).rows };
 *   }
 *
 * and the client selects `{ id matches { id title } }`.
 *
 * Why: behind field middleware the field "is stored as its middleware's input": `walkValue`
 * (lib/graphql/wire-value.ts) walks the whole array with the list type, every item's selected
 * fields stored; run-field.ts `settle` then refuses the encoded answer (`answer.body.length >
 * route.maxResponseBytes`) and commits `response_too_large` in the mutation's place. The
 * extras budget (lib/graphql/middleware-extras.ts) bounds unselected fields only.
 *
 * What the docs promise (docs/guides/graphql.md): the stored value is "the resolver's value,
 * as GraphQL writes it, as far as the operation selects it" and what the middleware reads
 * "within what the route's `maxResponseBytes` leaves after the answer ... so that they never
 * make an answer too large to store that the app answers without the library"; the library's
 * promise: effects committed exactly once, no false error stored.
 *
 * Control: the same mutation without `@Idempotent()`: five matches answered.
 *
 * Severity: medium (a false error stored: the search the app would commit rolled back, and
 * `response_too_large` answered to every retry of the key; arguably the documented cost of
 * storing the middleware's input, but nowhere said of selected fields, and the first answer
 * also takes seconds: every item walked).
 *
 * Fails now: the first answer is `data: { runSearch: null }` with `response_too_large`.
 *
 * Suggested fix: store what the first answer's middleware returned for such a field, or the
 * input bounded as the extras are (past the budget, store the middleware's output and say a
 * replay does not run the middleware again), never a false `response_too_large`.
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
class Match {
  @Field(() => Int)
  id!: number;

  @Field()
  title!: string;
}

/** Nest's field middleware: the top five. */
const topFive: FieldMiddleware = async (_ctx, next) => ((await next()) as Match[]).slice(0, 5);

@ObjectType()
class Search {
  @Field(() => Int)
  id!: number;

  @Field(() => [Match], { middleware: [topFive] })
  matches!: Match[];
}

@Resolver(() => Search)
class SearchesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async search(): Promise<Search> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO searches DEFAULT VALUES RETURNING id',
    );
    const matches = await pool.query<Match>('SELECT id, title FROM documents ORDER BY id');
    return { id: rows[0].id, matches: matches.rows };
  }

  @Mutation(() => Search, { nullable: true })
  @Idempotent()
  runSearch(): Promise<Search> {
    return this.search();
  }

  @Mutation(() => Search, { nullable: true })
  runSearchPlain(): Promise<Search> {
    return this.search();
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
  providers: [SearchesResolver],
})
class SearchesModule {}

describe('adversary 76: a middleware keeping the top five of a long input', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_sliced_large', {
      module: SearchesModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE documents (id serial PRIMARY KEY, title text NOT NULL)');
        // 20 000 documents of 80-character titles: about 2 MB as the stored answer writes them.
        await admin.query(
          `INSERT INTO documents (title) SELECT 'Document ' || lpad(n::text, 5, '0') || ' ' || repeat('x', 65) FROM generate_series(1, 20000) n`,
        );
        await admin.query('CREATE TABLE searches (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string, key?: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json');
    if (key) call.set('Idempotency-Key', key);
    return call.timeout(60_000).send(JSON.stringify({ query }));
  };

  const count = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM searches')).rows[0].n,
    );

  const five = [1, 2, 3, 4, 5].map((n) => ({
    id: n,
    title: `Document ${String(n).padStart(5, '0')} ${'x'.repeat(65)}`,
  }));

  it('control: without the library, the top five', async () => {
    const plain = await post('mutation { runSearchPlain { id matches { id title } } }');
    expect(plain.body).toEqual({
      data: { runSearchPlain: { id: expect.any(Number), matches: five } },
    });
  }, 60_000);

  it('with @Idempotent(): the top five, committed once, replayed', async () => {
    const query = 'mutation { runSearch { id matches { id title } } }';
    const before = await count();
    const first = await post(query, 'adv76-mw-sliced-a');
    // Fails: runSearch null, response_too_large, the search rolled back.
    expect(first.body).toEqual({ data: { runSearch: { id: expect.any(Number), matches: five } } });
    const again = await post(query, 'adv76-mw-sliced-a');
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['runSearch'] } },
    });
    expect(await count()).toBe(before + 1);
  }, 60_000);
});
