import { createHash } from 'node:crypto';
import { inspect } from 'node:util';
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
 * Fixed (session of 2026-12-07, fourth): a middleware output's noted parent without a
 * prototype is marked so (`i: null` in its stored entry, lib/graphql/parent-entry.ts, told by
 * bare-objects.ts `hasNoPrototype`), and a replay rebuilds it with `unnamedPlain`, the value's
 * own `__instance: null` path (an adopted node keeps its absent prototype, `adoptedPrototype`).
 *
 * Adversary 110 (graphql): adversary 109's null-prototype fix (`__instance: null`: an object
 * without a prototype replays without one) is made for the mutation's value's `__parent`
 * only. Behind field middleware (Nest's docs' global logger in
 * `buildSchemaOptions.fieldMiddleware`, which puts every field behind middleware), a
 * `@ResolveField()`'s parent is a middleware output's parent, rebuilt on a replay as a plain
 * object: a dictionary-style row (`Object.create(null)`) is `instanceof Object` on every
 * replay, never at the first call. `dictionary` (`!(a instanceof Object)`) answers true, then
 * false; `audit` (`util.inspect(a)`) `[Object: null prototype] { id: 1, title: 'Hello' }`,
 * then `{ id: 1, title: 'Hello' }`.
 *
 * User code: adversary 109's dictionary-style rows (`@ObjectType() Article { id; title }`,
 * each row `Object.assign(Object.create(null), { id, title })`; `@ResolveField() audit(
 * @Parent() a) { return inspect(a, { breakLength: Infinity }) }`, `dictionary(@Parent() a) {
 * return !(a instanceof Object) }`) in a list: `@ObjectType() Issue { id; articles:
 * [Article] }`, `@Mutation(() => Issue) @Idempotent() createIssue` returning `{ id,
 * articles }`, with `GraphQLModule.forRoot({ ..., buildSchemaOptions: { fieldMiddleware:
 * [logger] } })`, `logger = async (ctx, next) => { logged.push(ctx.info.fieldName); return
 * next(); }`; the client selects `{ id articles { id title audit dictionary } }`; Apollo,
 * code-first. (A row returned alone as the mutation's value replays right: that is the
 * value path, adversary 109's fix.)
 *
 * Code path: lib/graphql/app-parents.ts `notedParent` (the parent's own data noted into a
 * fresh `{}`: its prototype not noted) -> replay: the parent rebuilt as a plain object with
 * that data; nothing says it had no prototype (bare-objects.ts / `INSTANCE: null` are the
 * value path's only).
 *
 * Docs quote (docs/guides/graphql.md): "An object without a prototype (`Object.create(null)`,
 * a dictionary-style row) replays without one (`__instance: null`)"; "A `@ResolveField()`
 * under a middleware field of object type reads, on a replay, a parent rebuilt from the
 * answer with the own data it had at the first answer"; "A replay's resolvers get the same
 * values as the first call's, and the answer is the same bytes".
 *
 * Severity: high (every replay answers other bytes than the first answer).
 *
 * Fails now (un-skipped): first `dictionary` true, `audit` `[Object: null prototype] { id:
 * 1, title: 'Hello' }`; the replay false and `{ id: 1, title: 'Hello' }`.
 *
 * Controls: the same app returning a plain `{ id, title }` replays the same bytes.
 *
 * Suggested fix: note a middleware output's parent's absent prototype with its data (as
 * `INSTANCE: null` on the value path) and rebuild the replay's parent without one.
 */
let pool: Pool;
const logged: string[] = [];

// Nest's docs' field middleware example, global: every field is behind it.
const logger: FieldMiddleware = async (ctx, next) => {
  logged.push(ctx.info?.fieldName ?? '');
  return next();
};

@ObjectType()
class Article {
  @Field(() => Int)
  id!: number;

  @Field()
  title!: string;

  @Field(() => String, { nullable: true })
  subtitle?: string | null;
}

@ObjectType()
class Issue {
  @Field(() => Int)
  id!: number;

  @Field(() => [Article])
  articles!: Article[];
}

@Resolver(() => Issue)
class IssuesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  // An issue of two article rows, as a query builder gives them.
  @Mutation(() => Issue)
  @Idempotent()
  async createIssue(@Args('shape') shape: string): Promise<Issue> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO articles DEFAULT VALUES RETURNING id',
    );
    const articles = [1, 2].map((n) => {
      const data = { id: n, title: 'Hello' };
      if (shape === 'dictionary') return Object.assign(Object.create(null) as Article, data);
      if (shape === 'with-subtitle') return { ...data, subtitle: null };
      return data;
    });
    return { id: rows[0].id, articles };
  }
}

@Resolver(() => Article)
class ArticlesResolver {
  @ResolveField(() => String)
  etag(@Parent() article: Article): string {
    return createHash('sha256').update(JSON.stringify(article)).digest('hex').slice(0, 16);
  }

  @ResolveField(() => String)
  keys(@Parent() article: Article): string {
    return Object.keys(article).join(',');
  }

  @ResolveField(() => String)
  audit(@Parent() article: Article): string {
    return inspect(article, { breakLength: Infinity });
  }

  @ResolveField(() => Boolean)
  dictionary(@Parent() article: Article): boolean {
    return !(article instanceof Object);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      buildSchemaOptions: { fieldMiddleware: [logger] },
    }),
  ],
  providers: [IssuesResolver, ArticlesResolver],
})
class ArticlesModule {}

describe('adversary 110: behind a global field middleware a null-prototype parent replays with one', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv110_gql_mw_null_proto', {
      module: ArticlesModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE articles (id serial PRIMARY KEY)');
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

  const twice = async (key: string, shape: string, selection: string) => {
    const query = `mutation { createIssue(shape: "${shape}") { id articles ${selection} } }`;
    const first = await post(key, query);
    const again = await post(key, query);
    // eslint-disable-next-line no-console
    console.log('ARTICLE', first.text, again.text);
    return { first, again };
  };

  it('control: a plain object replays the same bytes', async () => {
    const { first, again } = await twice(
      'adv110-mw-null-control',
      'plain',
      '{ id title audit dictionary }',
    );
    expect(first.body.errors).toBeUndefined();
    expect(logged.length).toBeGreaterThan(0);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['createIssue']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });

  it('a dictionary-style row replays without a prototype', async () => {
    const { first, again } = await twice(
      'adv110-mw-null',
      'dictionary',
      '{ id title audit dictionary }',
    );
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data.createIssue.articles[0].dictionary).toBe(true);
    expect(again.body.extensions?.idempotency?.replayed).toEqual(['createIssue']);
    expect(JSON.stringify(again.body.data)).toBe(JSON.stringify(first.body.data));
  });
});
