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
 * Fixed (session of 2026-12-06, seventh): writeGraph walks its queue by a head index instead of
 * `shift()`, so a wide parent's rows are written in linear time (readGraph and same-data had no
 * such pattern). The test compares two sizes in one run (a ratio, not seconds: the machine's
 * load falls on both alike).
 *
 * Adversary 104 (graphql): the typed graph of a parent's own data is written in time
 * quadratic in its number of objects: a mutation whose value holds 200,000 small row objects
 * (a bulk import returning its rows, read by a `@ResolveField()`) blocks the event loop some
 * 25 s (50,000 rows: 2 s; JSON.stringify of the same: ~50 ms), every other request of the
 * process stalled meanwhile, the key held. It is written before the size check, so a
 * `maxResponseBytes` that leaves it out does not spare it.
 *
 * User code: `@ObjectType() class Batch { @Field(() => Int) id }`; `@Mutation(() => Batch)
 * @Idempotent() importRows(count)` returning `Object.assign(row, { rows: [...count rows as {
 * i }] })`; `@ResolveField(() => Int) imported(@Parent() b) { return b.rows.length }`; Apollo.
 *
 * Code path: lib/graphql/typed-graph.ts `writeGraph`: `drain()` takes each object from the
 * queue with `queue.shift()`, O(queue length) on a large array (V8 moves the rest), and an
 * array node queues all its items at once: O(n^2) for n objects.
 *
 * Docs (docs/guides/graphql.md): the kept data is "a graph of typed nodes the library writes
 * and reads without recursion, so a tree of any depth is kept"; the promise "nothing hangs
 * holding a key".
 *
 * Severity: medium (the process stalls for tens of seconds per such answer, linear growth
 * becomes quadratic; no effect repeated).
 *
 * Fails now (unskip the it.skip): the 200,000-row mutation answers after ~23 s; the same
 * without `@Idempotent()` after ~1-2 s.
 *
 * Suggested fix: walk the queue by an index (`for (let at = 0; at < queue.length; at += 1)`)
 * instead of `shift()`, clearing it once drained.
 */
let pool: Pool;

@ObjectType()
class Batch {
  @Field(() => Int)
  id!: number;
}

type BatchRow = Batch & { rows?: { i: number }[] };

async function make(count: number): Promise<BatchRow> {
  const { rows } = await pool.query<Batch>('INSERT INTO batches DEFAULT VALUES RETURNING id');
  return Object.assign(rows[0], { rows: Array.from({ length: count }, (_, i) => ({ i })) });
}

@Resolver(() => Batch)
class BatchesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Batch)
  @Idempotent()
  importRows(@Args('count', { type: () => Int }) count: number): Promise<BatchRow> {
    return make(count);
  }

  @Mutation(() => Batch)
  importRowsPlain(@Args('count', { type: () => Int }) count: number): Promise<BatchRow> {
    return make(count);
  }

  @ResolveField(() => Int)
  imported(@Parent() batch: BatchRow): number {
    return batch.rows?.length ?? 0;
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, maxResponseBytes: 64 * 1024 * 1024 }),
    }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [BatchesResolver],
})
class BatchesModule {}

describe('adversary 104: the typed graph of 200,000 rows', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv104_gql_quadratic', {
      module: BatchesModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE batches (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string | undefined, query: string) => {
    const req = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json');
    if (key) req.set('Idempotency-Key', key);
    return req.timeout(120_000).send(JSON.stringify({ query }));
  };

  it('control: 2,000 rows are kept and replayed at once; 100,000 without the library are answered', async () => {
    const query = 'mutation { importRows(count: 2000) { id imported } }';
    const firstAnswer = await post('adv104-quad-small', query);
    const again = await post('adv104-quad-small', query);
    expect(firstAnswer.body.data.importRows.imported).toBe(2000);
    expect(again.body.data).toEqual(firstAnswer.body.data);
    const plain = await post(
      undefined,
      'mutation { importRowsPlain(count: 100000) { id imported } }',
    );
    expect(plain.body.data.importRowsPlain.imported).toBe(100000);
  }, 60_000);

  /**
   * Time grows with the rows, not with their square: eight times the rows take well under
   * sixty-four times as long. A ratio in one run (the fastest of two tries of each size,
   * interleaved), not a bound in seconds: the machine's load falls on both sizes alike. Linear
   * writing gives about 8 here; the queue's `shift()` gave 30 and more.
   */
  it('eight times the rows are kept in well under sixty-four times as long', async () => {
    const took = async (count: number, key: string) => {
      const started = process.hrtime.bigint();
      const answer = await post(key, `mutation { importRows(count: ${count}) { id imported } }`);
      expect(answer.body.data?.importRows.imported).toBe(count);
      return Number(process.hrtime.bigint() - started) / 1e6;
    };
    const small: number[] = [];
    const big: number[] = [];
    for (const round of [1, 2]) {
      small.push(await took(12_500, `adv104-quad-12k-${round}`));
      big.push(await took(100_000, `adv104-quad-100k-${round}`));
    }
    const ratio = Math.min(...big) / Math.min(...small);
    // eslint-disable-next-line no-console
    console.log(
      `adversary 104 quadratic: 12,500 rows ${small} ms, 100,000 rows ${big} ms, ratio ${ratio.toFixed(1)}`,
    );
    expect(ratio).toBeLessThan(20);
  }, 240_000);
});
