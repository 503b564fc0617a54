import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import { Args, GraphQLModule, Info, Int, Mutation, Query, Resolver } from '@nestjs/graphql';
import { GraphQLError, type GraphQLResolveInfo } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 75c: under Apollo, an app `formatError` that maps an error's `locations` (and
 * keeps its message) is applied twice to a replayed error: the replay points elsewhere than
 * the first answer did.
 *
 * The app: Apollo on Express with a `formatError` that re-bases the lines of the document it
 * answers (a BFF that prepends a shared prelude of `PRELUDE_LINES` lines to the client's
 * documents, and points the client back at its own lines):
 *
 *   formatError: (formatted) => ({
 *     ...formatted,
 *     locations: formatted.locations?.map((l) => ({ ...l, line: l.line + PRELUDE_LINES })),
 *   }),
 *
 * and an `@Idempotent()` mutation `pay(cents)` that refuses by a `GraphQLError` located at its
 * argument (`new GraphQLError('refused', { nodes: [argumentNode] })`, as validation-style
 * errors are).
 *
 * Why: round 75b (4f3f01a) stores a field's error "at the locations its first answer gave it":
 * Apollo's `willSendResponse` hook (GraphqlReplayMarker, lib/graphql/replay-marker.ts) passes
 * `result.errors`, which Apollo has already put through `formatError` ("Apollo has formatted
 * its errors by now", its own comment), to `storeAnswersOf` (stored-at-answer.ts);
 * `answeredLocations` (error-location.ts) finds the entry by path and message and
 * `run-field.ts`' `store` writes those FORMATTED locations into the stored error. A replay
 * throws that error again, and Apollo formats it again: the mapping applied twice. Before
 * that commit the thrown error's own locations were stored, and a replay was formatted once,
 * as the first answer was.
 *
 * Expected (docs/guides/graphql.md, errors): "GraphQL gives the replay the same `path` and
 * `locations`: at the field, or, for a `GraphQLError` made with its own `nodes` (the argument
 * it refuses) ..., at those, as the first answer had them"; "The answers are the same bytes
 * when the operation is, but for the replay marker". The new line "The `locations` stored are
 * the ones the first answer went out with (read from its errors as the driver's hook sees
 * them)" does not say that under Apollo those are after the app's `formatError`, which the
 * replay then goes through again.
 *
 * Control: the same app and formatter, the mutation refusing with an error without `nodes`
 * (located by GraphQL at the field, stored without locations): the replay is the first answer;
 * passes.
 *
 * Severity: low (the replay's `errors[].locations` differ from the first answer's; a client or
 * an editor pointing at the wrong line; only with a formatter that maps locations and keeps the
 * message). Any non-idempotent location mapping shows it.
 *
 * Fails now: the replay's location is `{ line: 1 + 2 * PRELUDE_LINES }`, the first answer's
 * `{ line: 1 + PRELUDE_LINES }`.
 *
 * Suggested fix: under Apollo read the locations before `formatError` (the thrown error's own
 * are what graphql-js answered: keep them), or take the answer's only from a driver that
 * locates otherwise than graphql-js (Mercurius' jit), before its `errorFormatter`.
 *
 * Fixed: under Apollo the error is stored at its own locations (graphql-js answered them), not
 * read from `result.errors` after `formatError` (GraphqlReplayMarker's `willSendResponse`,
 * lib/graphql/replay-marker.ts, calls `storeAnswersOf(context)`); Mercurius' hook still reads its
 * answer's, before its `errorFormatter`.
 */
let pool: Pool;

/** Lines of the prelude the BFF prepends to each client's document. */
const PRELUDE_LINES = 3;

@Resolver()
class PaymentsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Int, { nullable: true })
  @Idempotent()
  async pay(
    @Args('cents', { type: () => Int }) cents: number,
    @Args('unlocated', { type: () => Boolean, defaultValue: false }) unlocated: boolean,
    @Info() info: GraphQLResolveInfo,
  ): Promise<number> {
    await pool.query('INSERT INTO payments (cents) VALUES ($1)', [cents]);
    if (unlocated) throw new GraphQLError('refused');
    // Located at the argument it refuses.
    const argument = info.fieldNodes[0].arguments?.[0];
    throw new GraphQLError('refused', { nodes: argument ? [argument] : undefined });
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      formatError: (formatted) => ({
        ...formatted,
        locations: formatted.locations?.map((l) => ({ ...l, line: l.line + PRELUDE_LINES })),
      }),
    }),
  ],
  providers: [PaymentsResolver],
})
class PaymentsModule {}

describe('adversary 75c: an Apollo formatError mapping locations, applied twice to a replay', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75c_gql_errloc_fmt', {
      module: PaymentsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, cents int NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['pay'] } },
  });

  it('control: an error without nodes, the replay is the first answer', async () => {
    const query = 'mutation { pay(cents: 5, unlocated: true) }';
    const first = await post('adv75c-errloc-fmt-c', query);
    expect(first.body).toMatchObject({
      data: { pay: null },
      errors: [{ message: 'refused', locations: [{ line: 1 + PRELUDE_LINES, column: 12 }] }],
    });
    const again = await post('adv75c-errloc-fmt-c', query);
    expect(again.body).toEqual(replayOf(first));
  });

  it('an error at its argument: the replay is the first answer', async () => {
    const query = 'mutation { pay(cents: 5) }';
    const first = await post('adv75c-errloc-fmt-a', query);
    expect(first.body).toMatchObject({
      data: { pay: null },
      errors: [{ message: 'refused', locations: [{ line: 1 + PRELUDE_LINES, column: 16 }] }],
    });
    const again = await post('adv75c-errloc-fmt-a', query);
    // Fails: the replay's location is line 1 + 2 * PRELUDE_LINES (formatted twice).
    expect(again.body).toEqual(replayOf(first));
  });
});
