/**
 * Adversary 82 (pool): the adversary-81 fix (the heartbeat runs on while the answer's COMMIT
 * waits for a statement the handler left running) is on the HTTP path only. An idempotent
 * GraphQL mutation on the pool seam whose resolver leaves a statement running (unawaited, or a
 * Kysely read given up on with the default 'ignore query' abort) loses its lease while the
 * library waits for it: a retry sent after one lease takes the key over and runs the resolver
 * a second time while the first is alive and about to commit; the first, whose resolver
 * answered, then gets `lease_lost` and its effects are rolled back.
 *
 *   @Mutation(() => Audit) @Idempotent({ leaseMs: 1_500 })
 *   async note(@Args('n') n: string) {
 *     runs += 1;                                   // an effect outside the database (an email)
 *     await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
 *     void pool.query('SELECT pg_sleep($1::float8)', [4]); // left running
 *     return { n };
 *   }
 *
 * Code path: lib/graphql/run-field.ts:95 `settle` calls `stopHeartbeat()` as soon as the
 * resolver settles, then the commit (lib/transaction/request-transaction.ts `commitNow` ->
 * `codeStatementsDone()`, unbounded by design) waits for the statement left running with no
 * renewal. Only lib/http/run-owned.ts:181/371 defer the stop with
 * `transaction.afterCodeStatements(stopHeartbeat)`. The same holds for jobs
 * (lib/jobs/idempotent-jobs.service.ts:574) and tasks (lib/tasks/idempotent-tasks.service.ts:491).
 *
 * Docs: docs/guides/transactions.md "Database work belongs before the answer": "A statement of
 * its code still running on the request's connection when the handler answers ... runs to its
 * end, and the stored answer and `COMMIT` are sent after it ... That wait is the handler's";
 * docs/guides/graphql.md: an idempotent mutation field is run once per key.
 *
 * Severity: high (the resolver runs twice for one key while the first run is alive: every effect
 * outside the database happens twice; the first caller gets an error for a mutation that ran).
 *
 * Fails now: the first answers `lease_lost` (its resolver had answered), the retry sent 2 s in
 * runs the resolver again and answers its data (runs = 2). Control: the same statement awaited: the retry answers
 * `key_in_progress`, runs = 1.
 *
 * Suggested fix: as for HTTP: in run-field.ts (and the job and task runners) stop the heartbeat
 * through `transaction.afterCodeStatements(stopHeartbeat)` on the success path, not when the
 * resolver settles.
 *
 * Fixed: the heartbeat a transaction's owner stops as its code settles runs on until the
 * statements that code left running are done, for every surface (LeaseRenewals.heartbeat,
 * lib/claim/lease-renewals.ts `heartbeatStop`), found and fixed apart by the hbsettle fixer.
 */
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

let pool: Pool;
const runs = new Map<string, number>();

@ObjectType()
class Audit {
  @Field()
  n!: string;
}

@Resolver(() => Audit)
class AuditResolver {
  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Audit)
  @Idempotent({ leaseMs: 1_500 })
  async unawaited(@Args('n') n: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    void pool.query('SELECT pg_sleep($1::float8)', [4]).catch(() => undefined);
    return { n };
  }

  @Mutation(() => Audit)
  @Idempotent({ leaseMs: 1_500 })
  async awaited(@Args('n') n: string) {
    runs.set(n, (runs.get(n) ?? 0) + 1);
    await pool.query('INSERT INTO audit (note) VALUES ($1)', [n]);
    await pool.query('SELECT pg_sleep($1::float8)', [4]);
    return { n };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 1_000 }),
    }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [AuditResolver],
})
class AuditModule {}

describe('adversary 82 pool: a GraphQL mutation loses its lease while its left-running statement is waited for', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv82_pool_gql_lease', {
      module: AuditModule,
      max: 8,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query(`CREATE TABLE audit (id bigserial PRIMARY KEY, note text NOT NULL)`);
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  async function mutate(field: string, n: string) {
    const answer = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', `key-${n}`)
      .timeout(15_000)
      .send({ query: `mutation { ${field}(n: "${n}") { n } }` });
    const { data, errors } = answer.body as {
      data: Record<string, { n: string } | null> | null;
      errors?: { message?: string; extensions?: { code?: unknown } }[];
    };
    const value = data?.[field];
    if (value) return value.n;
    const error = errors?.[0];
    return String(error?.extensions?.code ?? error?.message);
  }

  async function scenario(field: 'unawaited' | 'awaited') {
    const n = `${field}1`;
    const first = mutate(field, n);
    await new Promise((resolve) => setTimeout(resolve, 2_000)); // past one lease
    const retried = await mutate(field, n);
    const firstAnswer = await first;
    const { rows } = await fixture.admin.query(`SELECT 1 FROM audit WHERE note = $1`, [n]);
    return { first: firstAnswer, retried, runs: runs.get(n), written: rows.length };
  }

  it('control: the same statement awaited keeps the lease: the retry waits, one run', async () => {
    expect(await scenario('awaited')).toEqual({
      first: 'awaited1',
      retried: 'key_in_progress',
      runs: 1,
      written: 1,
    });
  }, 60_000);

  it('a statement left running never costs the lease', async () => {
    expect(await scenario('unawaited')).toEqual({
      first: 'unawaited1',
      retried: 'key_in_progress',
      runs: 1,
      written: 1,
    });
  }, 60_000);
});
