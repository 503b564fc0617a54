import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
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
 * Adversary 107 (graphql): round 106's `isJsonCycle` (lib/graphql/typed-graph.ts) takes
 * `MAX_JSON_DEPTH` (1,000) objects given by `toJSON()`s one inside another for a cycle. A
 * plain chain of 1,001 value objects each with an ordinary `toJSON()` (a document's revision
 * history, `previous` linking each revision to the one before: 21 kB, which `JSON.stringify`
 * writes without trouble) is then "no JSON form": the whole member is left out of the parent's
 * kept data. A replay's `@ResolveField()` that walks the history reads `undefined` and answers
 * 0 where the first answer said 1001. The same chain of 1,000 replays the same.
 *
 * User code: `class Revision { constructor(n, previous?) {} toJSON() { return { n, previous } } }`;
 * `@ObjectType() Doc { @Field(() => Int) id }` (its `history` no field);
 * `@ResolveField(() => Int) revisions(@Parent() d) { let n = 0; for (let r = d.history; r; r =
 * r.previous) n += 1; return n }`; `@Mutation(() => Doc) @Idempotent() saveDoc(revisions)`;
 * Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `writeParents` -> kept-data.ts `keepAll` ->
 * typed-graph.ts graph writer -> `isJsonCycle(target, at, links)`: `depth >= MAX_JSON_DEPTH`
 * returns true for 1,000 distinct `toJSON()` targets nested, not only where a target repeats;
 * the member is `left` ("with no JSON form").
 *
 * Docs quote (docs/guides/graphql.md): "A replay's resolvers get the same values as the first
 * call's, and the answer is the same bytes"; the typed graph keeps "a tree of any depth"
 * (adversary 103); only a `toJSON()` cycle has no form.
 *
 * Severity: medium (a replay answers another value; the log says the member has "no JSON
 * form", which is not so).
 *
 * Fails now (un-skipped): first `revisions: 1001`, replay `revisions: 0`.
 *
 * Controls: the same chain of 1,000 revisions replays `revisions: 1000`.
 *
 * Suggested fix: in `isJsonCycle`, take only a repeated target on the nesting path for a
 * cycle (`madeBy[node] === target`), never depth alone: the typed graph is written without
 * recursion, so depth costs nothing; for a `toJSON()` that makes a new object of a new class
 * instance each call without end, bound the total number of objects `toJSON()`s give in one
 * write (far above 1,000, e.g. the size limit's worth), with a message that says so.
 *
 * Fixed (session of 2026-12-07): typed-graph.ts `isJsonCycle` is a cycle only where the target
 * is on the chain above the place (no depth limit), walked only for a target whose `toJSON()`
 * gave an object before in the write; the work is bounded instead by the objects `toJSON()`s
 * may give in one write (`MAX_JSON_OBJECTS`, 50,000) and the steps walked (`MAX_JSON_WALK`).
 */
let pool: Pool;

class Revision {
  constructor(
    readonly n: number,
    readonly previous?: Revision,
  ) {}

  toJSON(): unknown {
    return { n: this.n, previous: this.previous };
  }
}

@ObjectType()
class Doc {
  @Field(() => Int)
  id!: number;
}

type DocRow = Doc & { history?: Revision };

@Resolver(() => Doc)
class DocsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Doc)
  @Idempotent()
  async saveDoc(@Args('revisions', { type: () => Int }) revisions: number): Promise<DocRow> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO docs DEFAULT VALUES RETURNING id',
    );
    let history: Revision | undefined;
    for (let i = 1; i <= revisions; i += 1) history = new Revision(i, history);
    return { id: rows[0].id, history };
  }

  @ResolveField(() => Int)
  revisions(@Parent() doc: DocRow): number {
    let n = 0;
    for (let at = doc.history; at; at = at.previous) n += 1;
    return n;
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
  providers: [DocsResolver],
})
class DocsModule {}

describe('adversary 107: a chain of 1,001 toJSON() objects taken for a cycle', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv107_gql_tojson_chain', {
      module: DocsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE docs (id serial PRIMARY KEY)');
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

  const twice = async (n: number) => {
    const query = `mutation { saveDoc(revisions: ${n}) { id revisions } }`;
    const first = await post(`adv107-tojson-chain-${n}`, query);
    const again = await post(`adv107-tojson-chain-${n}`, query);
    // eslint-disable-next-line no-console
    console.log('CHAIN', n, first.text, again.text);
    expect(first.body.data.saveDoc.revisions).toBe(n);
    return { first: first.body, again: again.body };
  };

  it('control: a chain of 1,000 revisions replays the same', async () => {
    const { first, again } = await twice(1000);
    expect(again.data).toEqual(first.data);
  });

  it('a chain of 1,001 revisions replays the same', async () => {
    const { first, again } = await twice(1001);
    expect(again.data).toEqual(first.data);
  });
});
