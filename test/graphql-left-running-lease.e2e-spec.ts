import { BadRequestException, Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { type PoolApp, startPoolApp } from './support/pool-app.js';

/**
 * A mutation field whose resolver leaves a statement running on the pool seam (a query left
 * unawaited, or one Kysely's default `'ignore query'` abort gave up on) past its short lease:
 * its answer's commit (or its error's) waits for that statement, and the key's heartbeat
 * renews the lease until the statement is done, as on an HTTP route (adversary 81). A retry
 * of the field arriving meanwhile is told the key is in progress; the resolver runs once, and
 * one row is kept. Before, the heartbeat stopped when the resolver settled: the retry took the
 * key over and ran the resolver again, and the first answer was `lease_lost`.
 *
 * Its error is stored without its effects once the ROLLBACK, queued behind the statement, is
 * done: the heartbeat covers that wait too (`heartbeatStop`, lib/claim/lease-renewals.ts), so
 * a retry on another replica meets the key in progress. (In one process, as here, a retry
 * stores the waiting error first and replays it, see lib/graphql/stored-at-answer.ts: the case
 * guards that the error path still runs once and keeps nothing.) One driver: the field's run
 * (lib/graphql/run-field.ts) is the same under both; the file stays under 15 s.
 */
let pool: Pool;
const runs = new Map<string, number>();

@ObjectType()
class Payment {
  @Field()
  ref!: string;
}

@Resolver(() => Payment)
class PaymentsResolver {
  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Payment)
  @Idempotent({ leaseMs: 1_000 })
  async pay(@Args('ref') ref: string, @Args('fails') fails: boolean) {
    runs.set(ref, (runs.get(ref) ?? 0) + 1);
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    // Left running: the commit of what the resolver comes to waits for it.
    void pool.query('SELECT pg_sleep(2.5)').catch(() => undefined);
    if (fails) throw new BadRequestException('card declined');
    return { ref };
  }
}

describe('a resolver that leaves a statement running past its lease (pool seam)', () => {
  const driver = 'apollo';
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({
          // Longer than the lease: a ROLLBACK queued behind the statement waits for it (its
          // deadline then cancels it), the heartbeat renewing meanwhile.
          useFactory: () => ({ globalKeys: true, pool, databaseTimeoutMs: 3_000 }),
        }),
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          graphiql: false,
        }),
      ],
      providers: [PaymentsResolver],
    })
    class PaymentsModule {}
    fixture = await startPoolApp(`gql_left_running_${driver}`, {
      module: PaymentsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  /** The field's data (its ref), or its error: the library's code, else its message. */
  const pay = async (ref: string, fails: boolean) => {
    const answer = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', ref)
      .timeout(10_000)
      .send({ query: `mutation { pay(ref: "${ref}", fails: ${fails}) { ref } }` });
    const { data, errors } = answer.body as {
      data: { pay?: { ref: string } } | null;
      errors?: { message?: string; extensions?: { code?: unknown } }[];
    };
    if (data?.pay) return data.pay.ref;
    const code = errors?.[0]?.extensions?.code;
    return typeof code === 'string' && /^(key|lease)_/.test(code) ? code : errors?.[0]?.message;
  };

  async function scenario(ref: string, fails: boolean) {
    const first = pay(ref, fails);
    await new Promise((resolve) => setTimeout(resolve, 1_600)); // past one lease
    const retried = await pay(ref, fails);
    const firstAnswer = await first;
    const { rows } = await fixture.admin.query('SELECT 1 FROM payments WHERE ref = $1', [ref]);
    return { first: firstAnswer, retried, runs: runs.get(ref), rows: rows.length };
  }

  it('its value: a retry meanwhile is told the key is in progress, one run, one row', async () => {
    const ref = `${driver}-value`;
    expect(await scenario(ref, false)).toEqual({
      first: ref,
      retried: 'key_in_progress',
      runs: 1,
      rows: 1,
    });
  }, 30_000);

  it('its error (stored without its effects): a retry meanwhile gets it too, one run', async () => {
    const ref = `${driver}-error`;
    expect(await scenario(ref, true)).toEqual({
      first: 'card declined',
      retried: 'card declined',
      runs: 1,
      rows: 0,
    });
  }, 30_000);
});
