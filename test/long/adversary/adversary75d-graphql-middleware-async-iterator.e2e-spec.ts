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
 * Adversary 75d: a list field behind field middleware whose input is an async iterator (an
 * async generator reading rows in batches, which the middleware collects into the list) is
 * answered at the first call, and every replay is an error: the one-shot async iterator is
 * neither read nor kept, it is stored as an empty object, and the replay's middleware hands
 * GraphQL that `{}` ("Expected Iterable").
 *
 * The app: `Import { id skus: [String!]! }`, `skus` behind Nest's field middleware `collect`
 * (`const value = await next(); if (value?.[Symbol.asyncIterator]) { const all = []; for await
 * (const item of value) all.push(item); return all; } return value`), the resolver returning
 * `{ id, skus: batches() }` where `async function* batches()` reads the import's rows page by
 * page; Apollo on Express. The client selects `{ id skus }`.
 *
 * Why: round 75c (c4fe878) reads a one-shot iterator once into an array (`isOneShot`,
 * lib/graphql/middleware-input.ts), but only a sync one (`Symbol.iterator in value`): an async
 * generator is no list to `fitsListType`, so `walkValue` (lib/graphql/wire-value.ts) keeps it
 * "as it is" (`keepInput`), `withGetterFields` (lib/graphql/middleware-extras.ts) returns it
 * as it is (an instance of a class), and `keepData` (lib/graphql/kept-data.ts) writes its own
 * data: `{}`. The first answer's middleware reads the resolver's own generator; a replay's gets
 * `{}`. A loss is logged; nothing refuses it.
 *
 * Expected (docs/guides/graphql.md): "A one-shot iterator (a `Map`'s `keys()`, a generator) is
 * no container the middleware maps: it is read once into an array, stored as a list, and the
 * first call's middleware is given that array", and on a replay the middleware "runs again on
 * that stored input"; a replay answers what the first call answered.
 *
 * Control: the same rows as an array (`skus: await all()`), the same middleware: answered and
 * replayed; passes.
 *
 * Severity: low-medium (every replay an error where the first call answered; a loss is
 * logged).
 *
 * Fails now: the replay is `{ data: { createImport: null }, errors: [ "Expected Iterable, but
 * did not find one for field \"Import.skus\"." ] }` where the first answer had the SKUs.
 *
 * Suggested fix: read an async one-shot iterator (`Symbol.asyncIterator` whose iterator is
 * itself) into an array as the sync one is, and give the first answer's middleware an async
 * iterator over that array; or refuse it at the first call rather than store a replay that
 * fails.
 * Fixed: lib/graphql/middleware-input.ts `isAsyncOneShot` / `readAsync`, and wire-value.ts
 * `walkValue` (`readOnceAsync`): an async one-shot iterator behind middleware is read once into
 * an array, stored as a list, the first answer's middleware given that array (`spent`).
 */
let pool: Pool;

/** Nest's field middleware: an async iterable collected into the list. */
const collect: FieldMiddleware = async (_ctx, next) => {
  const value: unknown = await next();
  if (typeof value === 'object' && value !== null && Symbol.asyncIterator in value) {
    const all: unknown[] = [];
    for await (const item of value as AsyncIterable<unknown>) all.push(item);
    return all;
  }
  return value;
};

@ObjectType()
class Import {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { middleware: [collect] })
  skus!: AsyncIterable<string> | string[];
}

/** The catalogue's SKUs, read page by page. */
async function* batches(): AsyncGenerator<string> {
  for (let page = 0; ; page++) {
    const { rows } = await pool.query<{ sku: string }>(
      'SELECT sku FROM catalogue ORDER BY sku LIMIT 2 OFFSET $1',
      [page * 2],
    );
    if (rows.length === 0) return;
    for (const row of rows) yield row.sku;
  }
}

@Resolver(() => Import)
class ImportsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Import, { nullable: true })
  @Idempotent()
  async createImport(
    @Args('array', { type: () => Boolean, defaultValue: false }) array: boolean,
  ): Promise<Import> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO imports DEFAULT VALUES RETURNING id',
    );
    if (!array) return { id: rows[0].id, skus: batches() };
    // The control: the same SKUs read first.
    const skus: string[] = [];
    for await (const sku of batches()) skus.push(sku);
    return { id: rows[0].id, skus };
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
  providers: [ImportsResolver],
})
class ImportsModule {}

describe('adversary 75d: an async iterator behind list middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75d_gql_mw_async_iter', {
      module: ImportsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE catalogue (sku text PRIMARY KEY)');
        await admin.query(`INSERT INTO catalogue VALUES ('A-1'), ('B-2'), ('C-3')`);
        await admin.query('CREATE TABLE imports (id serial PRIMARY KEY)');
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

  const replayOf = (first: { body: Record<string, unknown> }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['createImport'] } },
  });

  const skus = ['A-1', 'B-2', 'C-3'];

  it('control: the SKUs as an array, answered and replayed', async () => {
    const query = 'mutation { createImport(array: true) { id skus } }';
    const first = await post('adv75d-mw-async-iter-c', query);
    expect(first.body).toEqual({ data: { createImport: { id: expect.any(Number), skus } } });
    const again = await post('adv75d-mw-async-iter-c', query);
    expect(again.body).toEqual(replayOf(first));
  });

  it('the SKUs as an async generator: answered, and replayed the same', async () => {
    const query = 'mutation { createImport { id skus } }';
    const first = await post('adv75d-mw-async-iter-a', query);
    expect(first.body).toEqual({ data: { createImport: { id: expect.any(Number), skus } } });
    const again = await post('adv75d-mw-async-iter-a', query);
    // Fails: createImport null, "Expected Iterable, but did not find one for field ...".
    expect(again.body).toEqual(replayOf(first));
  });
});
