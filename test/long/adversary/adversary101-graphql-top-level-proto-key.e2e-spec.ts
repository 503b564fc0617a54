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
 * Adversary 101 (graphql): a resolver's value that is a JSON document as `JSON.parse` made it
 * (pg's parse of a `jsonb` column: `return rows[0].doc`), whose own keys include `__proto__`
 * (a client's document `{"title": "t", "__proto__": {"role": "admin"}, "~prototype": 1,
 * "prototype": 2, "constructor": {...}}`), with a `@ResolveField()` that reads its parent's own
 * keys (`Object.keys(parent)`, `JSON.stringify(parent)`: a document's extra members). The first
 * call answers `extraKeys` with `__proto__`; every replay answers it without: the
 * `__proto__` member is silently lost from what the replay's resolvers read (and its value
 * becomes the prototype of the library's own record). The same keys one level down (a
 * column's document, adversary99-graphql-prototype-keys-table) replay right. Besides, the
 * replay's object has its keys in another order (`id` first, the first call's last), which
 * `JSON.stringify(parent)` shows too ("any own key comes back an own key, in its order").
 *
 * User code: `@ObjectType() class Submission { @Field(() => Int) id }`; `@Mutation(() =>
 * Submission) @Idempotent() submit(@Args('document') document: string)` inserting the document
 * into a `jsonb` column and returning the row's parsed `doc` with its `id`; `@ResolveField(() =>
 * [String]) extraKeys(@Parent() s) { return Object.keys(s).filter((k) => k !== 'id') }`; Apollo.
 *
 * Code path: lib/graphql/wire-value.ts `walkValue`: the loop over `Object.keys(source)` puts
 * data beside the fields by ASSIGNMENT (`parent[name] = source[name]`, `kept[name] = ...`):
 * for `__proto__` that calls Object.prototype's setter, setting the record's prototype, so no
 * own key `__proto__` is kept; `keepData` (lib/graphql/kept-data.ts, which would escape it
 * right) never sees it. `fromWire` then writes fields first and `__parent` after (the order).
 *
 * Docs (docs/guides/graphql.md, "What the resolvers under it read, as they first read it"):
 * "any own key comes back an own key, in its order: `prototype`, `constructor` and
 * `__proto__` too, ... a JSON document's `"__proto__"`"; "A replay's resolvers get the same
 * values as the first call's, and the answer is the same bytes."
 *
 * Severity: high (a committed mutation's answer replayed with a different value, silently).
 *
 * Fails now (unskip the it.skip): first `extraKeys: ["title","__proto__","prototype",
 * "~prototype","constructor"]`, `extra: "{\"title\":\"t\",\"__proto__\":{\"role\":
 * \"admin\"},...,\"id\":6}"`; replay `extraKeys: ["title","prototype","~prototype",
 * "constructor"]`, `extra: "{\"id\":6,\"title\":\"t\",\"prototype\":2,...}"` (no
 * `__proto__`, `id` first).
 * Control (passes): `submitPlain`, the same resolver without `@Idempotent()`.
 *
 * Suggested fix: in `walkValue` (and `ownData`, `kept[name] = own.value`), define members of
 * `parent`/`kept` with `Object.defineProperty` (as kept-data.ts `defineMember` does), or make
 * those records `Object.create(null)`; on a replay, write the object's own keys in the first
 * call's order (keep the order of its own keys, fields included).
 *
 * Fixed (session of 2026-12-06, sixth): every place lib/graphql writes a data key onto an object
 * it builds (walkValue's `kept`/`parent`, `ownData`, `keptParent`, class-tree's getters' data and
 * named plain objects, merged aliases, a middleware output's rebuilt parent, an error's props,
 * kept-data's copies) defines it with `defineOwn` (lib/graphql/own-member.ts: own, enumerable,
 * writable, configurable), never assigns it, so a top-level `"__proto__"` stays an own key and
 * sets no prototype; the key order is kept by `__keys` (see adversary101-graphql-parent-key-order-
 * etag). Unit specs: own-member.spec.ts, wire-value.spec.ts (a JSON document's `__proto__`,
 * `prototype`, `constructor` replayed in order).
 */
let pool: Pool;

@ObjectType()
class Submission {
  @Field(() => Int)
  id!: number;
}

@Resolver(() => Submission)
class SubmissionsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Submission)
  @Idempotent()
  submit(@Args('document') document: string): Promise<Submission> {
    return this.make(document);
  }

  @Mutation(() => Submission)
  submitPlain(@Args('document') document: string): Promise<Submission> {
    return this.make(document);
  }

  @ResolveField(() => [String])
  extraKeys(@Parent() submission: Submission): string[] {
    return Object.keys(submission).filter((key) => key !== 'id');
  }

  @ResolveField(() => String)
  extra(@Parent() submission: Submission): string {
    return JSON.stringify(submission);
  }

  private async make(document: string): Promise<Submission> {
    const { rows } = await pool.query<{ id: number; doc: Submission }>(
      'INSERT INTO submissions (doc) VALUES ($1::jsonb) RETURNING id, doc',
      [document],
    );
    // The stored jsonb document as the object, its id beside (pg parses jsonb with JSON.parse).
    return Object.defineProperty(rows[0].doc, 'id', {
      value: rows[0].id,
      enumerable: true,
      writable: true,
      configurable: true,
    });
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
  providers: [SubmissionsResolver],
})
class SubmissionsModule {}

describe('adversary 101: a resolver value whose own keys are __proto__ and ~prototype', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv101_gql_top_proto', {
      module: SubmissionsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE submissions (id serial PRIMARY KEY, doc jsonb NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const count = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM submissions')).rows[0].n;

  const post = (key: string, query: string, variables: unknown) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query, variables }));

  const doc =
    '{"title":"t","__proto__":{"role":"admin"},"~prototype":1,"prototype":2,"constructor":{"name":"c"}}';

  it('control: without the library, the own key __proto__ of the document is read', async () => {
    const plain = await post(
      'adv101-top-plain',
      'mutation($d: String!) { submitPlain(document: $d) { id extraKeys } }',
      { d: doc },
    );
    expect(plain.body.data.submitPlain.extraKeys).toContain('__proto__');
  });

  it('a replay gives the @ResolveField() the own keys the first call read', async () => {
    const query = 'mutation($d: String!) { submit(document: $d) { id extraKeys extra } }';
    const before = await count();
    const firstAnswer = await post('adv101-top', query, { d: doc });
    const again = await post('adv101-top', query, { d: doc });
    // eslint-disable-next-line no-console
    console.log('TOP', firstAnswer.text, again.text);
    expect(firstAnswer.body.data.submit.extraKeys).toContain('__proto__');
    expect(again.body.data).toEqual(firstAnswer.body.data);
    expect(await count()).toBe(before + 1);
  });
});
