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
 * Fixed (session of 2026-12-07, second): `isJsonCycle` (lib/graphql/typed-graph.ts) remembers
 * at each node it walks whether the target is at or above it (`JsonLinks.known`; a node's
 * links never change once written), so a walk stops at the first node that knows: the value
 * objects each revision holds walk a step or two, not the chain (10.3M steps before, over the
 * 10M bound). Table cases in typed-graph.spec.ts.
 *
 * Adversary 108 (graphql): the work bound of round 107's cycle test (`MAX_JSON_WALK`, 10M
 * steps per write) is hit by ordinary data far below the documented 50,000-object bound. Each
 * call of a `toJSON()` whose target was called before walks the whole chain of `toJSON()`
 * objects above its place (`isJsonCycle`); a revision history whose every revision holds the
 * document's one author, currency and locale value objects (each `toJSON()` giving a new
 * `{ code }`) walks 3 x n^2 / 2 steps: at 2,600 revisions (10,400 objects given by
 * `toJSON()`s, 2,600 deep, which `JSON.stringify` writes) the bound is passed and the whole
 * `history` is left out of the parent's data. The replay's `@ResolveField()` reads no history.
 *
 * User code: round 107's `Doc { id }` whose raw row holds `history` (no field), a chain of
 * `Revision`s, each `toJSON() { return { n, author, currency, locale, previous } }`, the
 * three shared `Code` value objects `toJSON() { return { code } }`; `@ResolveField(() => Int)
 * revisions(@Parent() doc)` counts the chain; Apollo, code-first.
 *
 * Code path: lib/graphql/wire-value.ts `writeParents` -> kept-data.ts `keepAll` ->
 * typed-graph.ts `graphWriter` `cell` (`makers.has(target)` -> `isJsonCycle` walks
 * `links.nearest`/`links.up` to the root of the chain each time; `walked > MAX_JSON_WALK`
 * throws 'toJSON() chains too long to walk') -> the member `history` left out.
 *
 * Docs quote (docs/guides/graphql.md): a member is left out where it has no typed JSON form,
 * "a cycle through a `toJSON()` ... or more than 50,000 objects given by `toJSON()`s in one
 * answer ...; a chain of objects each given by its own `toJSON()`, one inside another, is
 * written at any length up to that; one giving a string, ..., a new object or the object
 * itself is shared by any number of places". The step bound is said nowhere.
 *
 * Severity: high (a wrong answer replayed: `revisions` 2600 becomes 0; the data is left out
 * where the docs promise it kept).
 *
 * Fails now (un-skipped): first answer `revisions` 2600; the replay answers 0.
 *
 * Controls: 1,000 revisions (4,000 objects given, 1.5M steps) replay `revisions` 1000.
 *
 * Suggested fix: make the repeat test O(1) per call (keep, per target, the set or a counter of
 * the chain nodes it made that are open on the current path, or mark each node's chain of
 * makers once, as a persistent linked list with a per-target depth index), so no step bound is
 * needed below the object bound; or raise the bound to what the object bound implies and say
 * it in the docs.
 */
let pool: Pool;

/** A value object, written by JSON as its code (a new object each call, as most are). */
class Code {
  constructor(readonly code: string) {}

  toJSON(): unknown {
    return { code: this.code };
  }
}

class Revision {
  constructor(
    readonly n: number,
    readonly author: Code,
    readonly currency: Code,
    readonly locale: Code,
    readonly previous?: Revision,
  ) {}

  toJSON(): unknown {
    const { n, author, currency, locale, previous } = this;
    return { n, author, currency, locale, previous };
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
    // The document's one author, currency and locale, on each of its revisions.
    const author = new Code('ada');
    const currency = new Code('EUR');
    const locale = new Code('fr-FR');
    let history: Revision | undefined;
    for (let i = 1; i <= revisions; i += 1) {
      history = new Revision(i, author, currency, locale, history);
    }
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

describe('adversary 108: a toJSON() chain sharing value objects hits the walk bound', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv108_gql_tojson_walk', {
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
      .timeout(30_000)
      .send(JSON.stringify({ query }));

  const twice = async (n: number) => {
    const query = `mutation { saveDoc(revisions: ${n}) { id revisions } }`;
    const first = await post(`adv108-tojson-walk-${n}`, query);
    const again = await post(`adv108-tojson-walk-${n}`, query);
    // eslint-disable-next-line no-console
    console.log('WALK', n, first.text, again.text);
    expect(first.body.data.saveDoc.revisions).toBe(n);
    return { first: first.body, again: again.body };
  };

  it('control: 1,000 revisions (4,000 objects given by toJSON) replay the same', async () => {
    const { first, again } = await twice(1000);
    expect(again.extensions?.idempotency?.replayed).toEqual(['saveDoc']);
    expect(again.data).toEqual(first.data);
  });

  it('2,600 revisions (10,400 objects given by toJSON) replay the same', async () => {
    const { first, again } = await twice(2600);
    expect(again.extensions?.idempotency?.replayed).toEqual(['saveDoc']);
    expect(again.data).toEqual(first.data);
  });
});
