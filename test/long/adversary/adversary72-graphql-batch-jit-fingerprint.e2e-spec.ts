import { jest } from '@jest/globals';
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
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 72: round 70 comes back in a BATCHED request. On Mercurius with `jit: 1`
 * and `allowBatchedQueries: true`, a batch whose operations carry their keys in an argument
 * (what the guide says to do in a batch: "give each call its own key in an argument there")
 * and whose `DateTime` argument comes from a variable with a default in the document
 * (`mutation Book($key: String!, $at: DateTime = "2026-03-01T09:00:00Z") { book(key: $key,
 * at: $at) { id } }`, `variables: { key }`) commits on its first send, and its honest retry
 * (the same bytes) is refused with `key_mismatch` (422), for ever.
 *
 * Why: round 70's fix coerces the variables "from what the request sent" (`sentVariables` in
 * lib/graphql/read-field.ts), but reads them from `request.body` only when the body is one
 * operation's object: `if (!body || typeof body !== 'object' || Array.isArray(body)) return
 * undefined`. A batch's body is an array, and `readField` only takes the batch's own entry
 * when the key is NOT an argument (`const batch = arg === undefined && Array.isArray(...)`;
 * and a batch of more than one has no single entry to take). So for a field keyed by an
 * argument in a batch, `argumentValues` falls back to `info.variableValues`, the EXECUTOR's
 * coercion: graphql-js on the document's first run (the default a `Date`), graphql-jit from
 * its second run on (the default inlined as its JSON, an ISO string, which Nest's DateTime
 * `serialize()` writes as null). Two fingerprints for one request. Apollo Client's
 * `BatchHttpLink` sends even a single operation as an array.
 *
 * Expected (docs/guides/graphql.md, "Where it cannot go"): "the arguments are fingerprinted as
 * graphql-js coerces them from the operation and the variables the request sent, so Mercurius'
 * `jit` (which compiles a document from its second run) fingerprints a retry as its first
 * run." The batch's retry is replayed: one row per key.
 *
 * Control (passes): the same operation and variables sent alone (not in an array), then again:
 * replayed.
 *
 * Severity: medium-low (Mercurius with jit and batching, keyed the documented way, and a date
 * variable's default: a committed mutation whose retries answer 422 for ever, as round 70).
 *
 * Fails now: the batch's retry answers errors [{ extensions: { code: 'key_mismatch' } }].
 *
 * Fixed: the variables are read from the batch's entry of the field's own operation
 * (`operationBody` in lib/graphql/read-field.ts: by Mercurius' `operationId` in the context,
 * else the one entry whose query is the operation's text), as from a body of one operation.
 */
let pool: Pool;

@ObjectType()
class Booking {
  @Field(() => Int)
  id!: number;
}

@Resolver()
class BookResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Booking)
  @Idempotent({ keyFrom: { arg: 'key' } })
  async book(
    @Args('key') _key: string,
    @Args('at', { type: () => Date }) at: Date | string,
  ): Promise<Booking> {
    // pg takes a Date or its ISO string alike: the app sees no difference.
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO bookings (at) VALUES ($1) RETURNING id',
      [at],
    );
    return { id: rows[0].id };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<MercuriusDriverConfig>({
      driver: MercuriusDriver,
      autoSchemaFile: true,
      graphiql: false,
      jit: 1,
      allowBatchedQueries: true,
    }),
  ],
  providers: [BookResolver],
})
class BookModule {}

/** The client's document; each test its own (Mercurius caches and compiles per document). */
const documentOf = (name: string, at: string) =>
  `mutation ${name}($key: String!, $at: DateTime = "${at}") { book(key: $key, at: $at) { id } }`;

interface Answer {
  data?: { book?: { id: number } | null } | null;
  errors?: { extensions?: Record<string, unknown> }[];
  extensions?: Record<string, unknown>;
}

describe('adversary 72: a batch keyed by argument, a DateTime variable default, Mercurius jit: 1', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv72_batch_jit', {
      module: BookModule,
      max: 4,
      adapter: 'fastify',
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE bookings (id serial PRIMARY KEY, at timestamptz NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (body: unknown) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .timeout(10_000)
      .set('Content-Type', 'application/json')
      .send(JSON.stringify(body));
  const rows = async (at: string) =>
    (
      await fixture.admin.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM bookings WHERE at = $1',
        [at],
      )
    ).rows[0].n;
  const replayOf = (first: Answer): Answer => ({
    ...first,
    extensions: { idempotency: { replayed: ['book'] } },
  });

  it('control: the operation sent alone, its retries replayed', async () => {
    const at = '2026-03-01T08:00:00Z';
    const operation = { query: documentOf('Alone', at), variables: { key: 'alone-1' } };
    const first = (await post(operation)).body as Answer;
    expect(first.errors).toBeUndefined();
    for (let i = 0; i < 2; i++) {
      expect((await post(operation)).body).toEqual(replayOf(first));
    }
    expect(await rows(at)).toBe(1);
  });

  it('the same batch again is replayed, not refused', async () => {
    const at = '2026-03-01T09:00:00Z';
    // A batch of one, as BatchHttpLink sends an operation whose headers differ from others'.
    const batch = [{ query: documentOf('Batched', at), variables: { key: 'batch-1' } }];
    const first = (await post(batch)).body as Answer[];
    expect(first[0].errors).toBeUndefined();
    expect(first[0].data?.book?.id).toEqual(expect.any(Number));
    for (let i = 0; i < 2; i++) {
      const retried = (await post(batch)).body as Answer[];
      // Observed: errors [{ extensions: { code: 'key_mismatch', status: 422 } }], data null.
      expect(retried[0].errors?.[0]?.extensions?.code).toBeUndefined();
      expect(retried).toEqual(first.map(replayOf));
    }
    expect(await rows(at)).toBe(1);
  });

  it('a batch of two calls of one document, each its own key and default: both replayed', async () => {
    const at = '2026-03-01T10:00:00Z';
    // One document twice: its entry is told by Mercurius' operationId, not by its text.
    const batch = [
      { query: documentOf('Twice', at), variables: { key: 'twice-1' } },
      { query: documentOf('Twice', at), variables: { key: 'twice-2' } },
    ];
    const first = (await post(batch)).body as Answer[];
    expect(first.map((answer) => answer.errors)).toEqual([undefined, undefined]);
    for (let i = 0; i < 2; i++) {
      const retried = (await post(batch)).body as Answer[];
      expect(retried).toEqual(first.map(replayOf));
    }
    expect(await rows(at)).toBe(2);
  });
});
