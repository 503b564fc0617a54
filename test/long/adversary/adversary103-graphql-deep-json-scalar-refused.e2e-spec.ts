import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { GraphQLScalarType } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-06, seventh): the scalar's value read back was compared with node's
 * `isDeepStrictEqual`, whose recursive walk overflowed (a `RangeError` of Node's realm, which
 * graphql-js took for no `Error`); `sameData` (lib/graphql/same-data.ts) compares by the typed
 * graphs, written without recursion, where it overflows, and the kept copies are graph-written
 * too.
 *
 * Adversary 103 (graphql): a JSON scalar's document nested some 2,600 levels deep (a
 * stored comment thread, a parsed config, a tree a client built) is answered by the same
 * mutation without `@Idempotent()` (graphql-js and Apollo write it: its effect commits, its
 * answer is the document). Under `@Idempotent()` the mutation's work is rolled back and the
 * key is answered, at once and on every retry for ever, `"Unexpected error value: {}"`
 * (`INTERNAL_SERVER_ERROR`): no clear error (not the library's `response_too_large`, no
 * problem code, no word of depth), a stored permanent refusal of a request the app answers
 * without the library. At 2,500 levels it is answered and replayed; at 5,000 the app fails
 * without the library too (Apollo's own "Maximum call stack size exceeded"), which is not
 * this break.
 *
 * User code: `const Json = new GraphQLScalarType({ name: 'JSON', serialize: (v) => v })`
 * (what graphql-type-json does); `@ObjectType() class Doc { @Field(() => Int) id;
 * @Field(() => Json) doc }`; `@Mutation(() => Doc) @Idempotent() createDoc(@Args('n') n)`
 * inserting a row and returning `{ id, doc: nested(n) }` (`{ c: { c: ... { leaf: 1 } } }`);
 * Apollo.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue` (the scalar's wire value checked and copied
 * as JSON: `leafWire`, `strictJson`-like recursion, a frame or more per level, beside the
 * stored answer's own copies in lib/graphql/kept-data.ts and superjson) overflows the stack
 * where `JSON.stringify` does not; what is thrown reaches GraphQL as a value that is no
 * `Error` (graphql-js: "Unexpected error value: {}"), and is stored as the key's answer.
 *
 * Docs: README / docs promise "bad input gets a clear error"; docs/guides/graphql.md ("The
 * answers are the same bytes ... a thrown value that is no `Error` is stored as graphql-js
 * writes it ... Throw `Error`s"): here the app threw nothing; the library's own failure is
 * stored as the answer. No limit on a scalar value's depth is stated (docs/ mention
 * `maxResponseBytes` only, and this document is ~20 KB).
 *
 * Severity: medium (a mutation the app answers without the library is refused for ever under
 * its key with an unclear message; nothing is committed, so no effect is lost or doubled).
 *
 * Fails now (unskip the it.skip): without `@Idempotent()` (control) `{"data":{"createDocPlain":
 * {"id":1,"doc":{"c":{"c":...}}}}}` and one row; with it, `{"errors":[{"message":"Unexpected
 * error value: {}",...,"path":["createDoc"],"extensions":{"code":"INTERNAL_SERVER_ERROR"}}],
 * "data":null}` and no row, and the same error replayed (`"replayed":["createDoc"]`).
 *
 * Suggested fix: walk values iteratively (an explicit stack) or with a depth bound; catch a
 * `RangeError` from the walk and answer a clear problem (`response_not_storable`, a depth
 * named) that is NOT stored as a permanent answer of the app's, or store the wire value as
 * the JSON text GraphQL writes.
 */
let pool: Pool;

const Json = new GraphQLScalarType({
  name: 'JSON',
  serialize: (value) => value,
  parseValue: (value) => value,
});

function nested(n: number): unknown {
  let value: unknown = { leaf: 1 };
  for (let i = 0; i < n; i += 1) value = { c: value };
  return value;
}

@ObjectType()
class Doc {
  @Field(() => Int)
  id!: number;

  @Field(() => Json)
  doc!: unknown;
}

@Resolver(() => Doc)
class DocsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Doc)
  @Idempotent()
  async createDoc(@Args('n', { type: () => Int }) n: number): Promise<Doc> {
    return this.make(n);
  }

  @Mutation(() => Doc)
  async createDocPlain(@Args('n', { type: () => Int }) n: number): Promise<Doc> {
    return this.make(n);
  }

  private async make(n: number): Promise<Doc> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO docs DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, doc: nested(n) };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      resolvers: { JSON: Json },
    }),
  ],
  providers: [DocsResolver],
})
class DocsModule {}

describe('adversary 103: a deep JSON scalar document under @Idempotent()', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv103_gql_deep_json', {
      module: DocsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE docs (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const count = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM docs')).rows[0].n;

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  it('control: without @Idempotent() the app answers the 3,000-deep document', async () => {
    const before = await count();
    const answer = await post(
      'adv103-deep-json-plain',
      'mutation { createDocPlain(n: 3000) { id doc } }',
    );
    expect(answer.body.errors).toBeUndefined();
    expect(answer.body.data.createDocPlain.doc.c.c.c).toBeDefined();
    expect(await count()).toBe(before + 1);
  });

  it('control: a 1,000-deep document is answered and replayed the same', async () => {
    const query = 'mutation { createDoc(n: 1000) { id doc } }';
    const firstAnswer = await post('adv103-deep-json-1000', query);
    const again = await post('adv103-deep-json-1000', query);
    expect(firstAnswer.body.errors).toBeUndefined();
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(firstAnswer.body.data));
  });

  it('a 3,000-deep document is answered under @Idempotent()', async () => {
    const query = 'mutation { createDoc(n: 3000) { id doc } }';
    const before = await count();
    const firstAnswer = await post('adv103-deep-json-3000', query);
    const again = await post('adv103-deep-json-3000', query);
    // eslint-disable-next-line no-console
    console.log('DEEP', firstAnswer.text.slice(0, 300), again.text.slice(0, 300));
    expect(firstAnswer.body.errors).toBeUndefined();
    expect(await count()).toBe(before + 1);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(firstAnswer.body.data));
  });
});
