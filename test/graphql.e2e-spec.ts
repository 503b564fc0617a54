import { jest } from '@jest/globals';
import { type INestApplication } from '@nestjs/common';
import { Int, Mutation, Query, Resolver, ResolveField, Subscription } from '@nestjs/graphql';
import { getDataSourceToken } from '@nestjs/typeorm';
import request from 'supertest';
import { type DataSource } from 'typeorm';
import { Idempotent } from '../lib/index.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { expectReplayOf, withoutMarker } from './support/graphql-replay.js';

// Mercurius requires @fastify/static (for GraphiQL, which these apps leave off), which requires
// an ES module: Node 20 can, jest's CommonJS loader cannot. A stand-in lets Mercurius load.
jest.mock('@fastify/static', () => () => undefined);
const { createTransfersTable, GRAPHQL_DRIVERS, startGraphqlApp, Transfer } =
  await import('./support/graphql-app.js');

/** One entry of a GraphQL answer's `errors`. */
interface GraphqlError {
  message: string;
  path?: (string | number)[];
  extensions?: Record<string, unknown>;
}

interface GraphqlAnswer {
  data?: Record<string, unknown> | null;
  errors?: GraphqlError[];
  extensions?: Record<string, unknown>;
}

const IN_PROGRESS = 'A request with this idempotency key is still being processed; retry later.';
const MISMATCH =
  'This idempotency key was already used with a different operation (another mutation field, ' +
  'or other arguments); use a new key for a new operation.';

/** `@Idempotent()` where it must not go, for the start-up check. */
@Resolver(() => Transfer)
class ReadsResolver {
  @Query(() => Int)
  @Idempotent()
  balance() {
    return 0;
  }
}

@Resolver(() => Transfer)
class EventsResolver {
  @Query(() => Int)
  ping() {
    return 0;
  }

  @Subscription(() => Transfer)
  @Idempotent()
  transferMade() {
    return undefined;
  }
}

@Resolver(() => Transfer)
class FieldsResolver {
  @Query(() => Int)
  ping() {
    return 0;
  }

  @Mutation(() => Int)
  noop() {
    return 0;
  }

  @ResolveField(() => Int)
  @Idempotent()
  fee() {
    return 0;
  }
}

describe.each(GRAPHQL_DRIVERS)('GraphQL mutations on %s', (driver) => {
  let database: TestDatabase;
  let app: INestApplication;
  /** A second instance on the same database: it knows a key only from PostgreSQL. */
  let other: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase(`graphql_${driver}`);
    app = await startGraphqlApp(database.url, driver);
    await createTransfersTable(app);
    other = await startGraphqlApp(database.url, driver);
  });
  afterAll(async () => {
    await app?.close();
    await other?.close();
    await database?.drop();
  });

  /** POSTs an operation, as a GraphQL client does; `key` goes in the Idempotency-Key header. */
  const post = (
    query: string,
    key?: string,
    variables?: Record<string, unknown>,
    to: INestApplication = app,
  ) => {
    const req = request(to.getHttpServer()).post('/graphql').send({ query, variables });
    return key === undefined ? req : req.set('Idempotency-Key', key);
  };
  const answer = async (
    query: string,
    key?: string,
    variables?: Record<string, unknown>,
    to: INestApplication = app,
  ) => {
    const res = await post(query, key, variables, to);
    expect(res.status).toBe(200);
    return { text: res.text, body: res.body as GraphqlAnswer };
  };
  /** Read over GraphQL too: the rows a mutation left, and the times it ran. */
  const rows = async (amount: number) =>
    (await answer(`{ transfers(amount: ${amount}) }`)).body.data!.transfers as number;
  /** The runs of `name` on both instances. */
  const calls = async (name: string) => {
    const query = `{ calls(name: "${name}") }`;
    const counts = await Promise.all(
      [app, other].map((to) => answer(query, undefined, undefined, to)),
    );
    return counts.reduce((sum, { body }) => sum + (body.data!.calls as number), 0);
  };

  it('runs a mutation once for 8 concurrent operations with one key; the others get 409s', async () => {
    const before = await calls('createTransfer');
    const query = 'mutation { createTransfer(amount: 101, delayMs: 300) { id amount } }';
    // Half to each instance: they meet in PostgreSQL.
    const answers = await Promise.all(
      Array.from({ length: 8 }, (_, i) => answer(query, 'race', undefined, i % 2 ? other : app)),
    );

    expect(await calls('createTransfer')).toBe(before + 1);
    expect(await rows(101)).toBe(1);
    const done = answers.filter((a) => a.body.data?.createTransfer);
    const refused = answers.filter((a) => a.body.errors);
    expect(done.length).toBeGreaterThanOrEqual(1);
    expect(done.length + refused.length).toBe(8);
    expect(new Set(done.map((a) => withoutMarker(a.text))).size).toBe(1);
    for (const { body } of refused) {
      expect(body.data).toBeNull();
      expect(body.errors).toEqual([
        expect.objectContaining({
          message: IN_PROGRESS,
          path: ['createTransfer'],
          extensions: { code: 'key_in_progress', status: 409, retryAfter: 1 },
        }),
      ]);
    }
    // Once it is done, a retry gets its answer, on either instance.
    expectReplayOf(await answer(query, 'race'), { text: withoutMarker(done[0].text) }, [
      'createTransfer',
    ]);
    expectReplayOf(
      await answer(query, 'race', undefined, other),
      { text: withoutMarker(done[0].text) },
      ['createTransfer'],
    );
  });

  it('control: the same resolver without @Idempotent() runs for each call', async () => {
    const query = 'mutation { plainTransfer(amount: 100) { id } }';
    const first = await answer(query, 'plain');
    const again = await answer(query, 'plain');
    expect(again.text).not.toBe(first.text);
    expect(await rows(100)).toBe(2);
  });

  it('replays the first answer byte for byte, however the operation is spelled', async () => {
    const first = await answer(
      'mutation { createTransfer(amount: 102, note: "rent") { id amount note } }',
      'replay',
    );
    expect(first.body.data!.createTransfer).toEqual({
      id: expect.any(Number),
      amount: 102,
      note: 'rent',
    });
    // Other white space, the arguments in another order and from variables: the same field.
    const again = await answer(
      'mutation Pay($amount: Int!) {\n  createTransfer(note: "rent", amount: $amount) {\n    id amount note\n  }\n}',
      'replay',
      { amount: 102 },
    );
    expectReplayOf(again, first, ['createTransfer']);
    // From the database, on an instance that never saw the key.
    const elsewhere = await answer(
      'mutation { createTransfer(amount: 102, note: "rent") { id amount note } }',
      'replay',
      undefined,
      other,
    );
    expectReplayOf(elsewhere, first, ['createTransfer']);
    expect(await rows(102)).toBe(1);
  });

  it('answers 422 key_mismatch for the key reused with other arguments', async () => {
    const first = await answer('mutation { createTransfer(amount: 103) { id } }', 'mismatch');
    expect(first.body.errors).toBeUndefined();
    const other = await answer('mutation { createTransfer(amount: 104) { id } }', 'mismatch');
    expect(other.body.data).toBeNull();
    expect(other.body.errors).toEqual([
      {
        message: MISMATCH,
        locations: [{ line: 1, column: 12 }],
        path: ['createTransfer'],
        extensions: { code: 'key_mismatch', status: 422 },
      },
    ]);
    expect(await rows(104)).toBe(0);
  });

  it('answers 409 key_in_progress with Retry-After while the first call runs', async () => {
    const query = 'mutation { createTransfer(amount: 105, delayMs: 1500) { id } }';
    const first = answer(query, 'slow');
    const dataSource = app.get<DataSource>(getDataSourceToken());
    // The first call holds its claim once its row is there.
    const claimed = async () =>
      (
        (await dataSource.query(
          "SELECT 1 FROM idempotency_keys WHERE key = 'slow:createTransfer'",
        )) as unknown[]
      ).length > 0;
    for (let waited = 0; !(await claimed()); waited += 20) {
      if (waited > 1000) throw new Error('the first call claimed no key');
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    const second = await answer(query, 'slow');
    expect(second.body.errors).toEqual([
      {
        message: IN_PROGRESS,
        locations: [{ line: 1, column: 12 }],
        path: ['createTransfer'],
        extensions: { code: 'key_in_progress', status: 409, retryAfter: 1 },
      },
    ]);
    const done = await first;
    expectReplayOf(await answer(query, 'slow'), done, ['createTransfer']);
    expect(await rows(105)).toBe(1);
  });

  it.each([
    [
      'a GraphQLError',
      'graphql',
      { code: 'CARD_DECLINED', reason: 'insufficient_funds' },
      'The card was declined',
    ],
    ['an HttpException', 'http', undefined, 'The amount is over the limit'],
    ['an Error', 'error', undefined, 'The ledger is closed'],
  ])(
    'replays %s the resolver threw: the same message, path and extensions, run once',
    async (_name, kind, extensions, message) => {
      const before = await calls('failTransfer');
      const query = `mutation { failTransfer(amount: 106, kind: "${kind}") { id } }`;
      const first = await answer(query, `fail-${kind}`);
      expect(first.body.data).toEqual({ failTransfer: null });
      expect(first.body.errors).toHaveLength(1);
      expect(first.body.errors![0]).toMatchObject({ message, path: ['failTransfer'] });
      if (extensions) expect(first.body.errors![0].extensions).toEqual(extensions);

      const again = await answer(query, `fail-${kind}`);
      expectReplayOf(again, first, ['failTransfer']);
      const elsewhere = await answer(query, `fail-${kind}`, undefined, other);
      expectReplayOf(elsewhere, first, ['failTransfer']);
      expect(await calls('failTransfer')).toBe(before + 1);
    },
  );

  it('rolls the resolver’s writes back when it fails; without the library they stay', async () => {
    const failed = await answer(
      'mutation { failTransfer(amount: 107, kind: "error") { id } }',
      'rb',
    );
    expect(failed.body.errors![0].message).toBe('The ledger is closed');
    expect(await rows(107)).toBe(0);
    // The control: the same write and failure without @Idempotent().
    const plain = await answer('mutation { plainFailTransfer(amount: 108) { id } }', 'rb-plain');
    expect(plain.body.errors![0].message).toBe('The ledger is closed');
    expect(await rows(108)).toBe(1);
  });

  it.each([
    [
      'RetryLaterError',
      'retry',
      'The bank did not answer in time',
      { code: 'retry_later', status: 503, retryAfter: 2 },
    ],
    [
      'a statement timeout',
      'timeout',
      'The database rolled this request back for a passing reason (a deadlock, a serialization failure, a statement or lock timeout); nothing was stored. Retry with the same key.',
      { code: 'database_transient', status: 503, retryAfter: 1 },
    ],
  ])(
    'gives the key back on %s: a 503, and the retry runs again',
    async (_name, kind, message, extensions) => {
      const before = await calls('failTransfer');
      const query = `mutation { failTransfer(amount: 109, kind: "${kind}") { id } }`;
      for (let attempt = 1; attempt <= 2; attempt++) {
        const res = await answer(query, `later-${kind}`);
        expect(res.body.errors).toEqual([
          { message, locations: [{ line: 1, column: 12 }], path: ['failTransfer'], extensions },
        ]);
        expect(await calls('failTransfer')).toBe(before + attempt);
      }
      expect(await rows(109)).toBe(0);
    },
  );

  it('stores response_too_large for a value over maxResponseBytes, its writes rolled back', async () => {
    const small = await answer('mutation { noteTransfer(amount: 114, size: 10) { id } }', 'size-1');
    expect(small.body.errors).toBeUndefined();
    const query = 'mutation { noteTransfer(amount: 115, size: 500) { note } }';
    const large = await answer(query, 'size-2');
    expect(large.body.errors).toEqual([
      {
        message:
          "The field's answer is larger than this mutation's maxResponseBytes (200 bytes): it cannot be stored for replays, so nothing of the mutation was committed.",
        locations: [{ line: 1, column: 12 }],
        path: ['noteTransfer'],
        extensions: { code: 'response_too_large', status: 500 },
      },
    ]);
    expectReplayOf(await answer(query, 'size-2', undefined, other), large, ['noteTransfer']);
    expect(await rows(114)).toBe(1);
    expect(await rows(115)).toBe(0);
  });

  it('keeps one record per field: two aliased calls under one key are two runs', async () => {
    const query =
      'mutation { a: createTransfer(amount: 110) { id } b: createTransfer(amount: 110) { id } }';
    const first = await answer(query, 'aliases');
    const { a, b } = first.body.data as { a: { id: number }; b: { id: number } };
    expect(a.id).not.toBe(b.id);
    expect(await rows(110)).toBe(2);
    const again = await answer(query, 'aliases');
    expectReplayOf(again, first, ['a', 'b']);
    expect(await rows(110)).toBe(2);
    // Each alias is its own record: b alone, with other arguments, is refused; a new alias runs.
    const other = await answer('mutation { b: createTransfer(amount: 111) { id } }', 'aliases');
    expect(other.body.errors![0].extensions).toEqual({ code: 'key_mismatch', status: 422 });
    const c = await answer('mutation { c: createTransfer(amount: 110) { id } }', 'aliases');
    expect(c.body.errors).toBeUndefined();
    expect(await rows(110)).toBe(3);
  });

  it('marks the replayed fields, by their name in the answer, in extensions.idempotency.replayed', async () => {
    const first = await answer(
      'mutation { a: createTransfer(amount: 117) { id } b: createTransfer(amount: 118) { id } }',
      'marker',
    );
    // A first answer carries no marker.
    expect(first.body).toEqual({
      data: { a: { id: expect.any(Number) }, b: { id: expect.any(Number) } },
    });
    // a again, a new field c under the key, and a field without @Idempotent(): only a is a replay.
    const mixed = await answer(
      'mutation { a: createTransfer(amount: 117) { id } c: createTransfer(amount: 119) { id } plainTransfer(amount: 120) { id } }',
      'marker',
    );
    expect(mixed.body).toEqual({
      data: {
        a: first.body.data!.a,
        c: { id: expect.any(Number) },
        plainTransfer: { id: expect.any(Number) },
      },
      extensions: { idempotency: { replayed: ['a'] } },
    });
    // Both replayed, on an instance that knows them only from the database, in their order.
    const both = await answer(
      'mutation { b: createTransfer(amount: 118) { id } a: createTransfer(amount: 117) { id } }',
      'marker',
      undefined,
      other,
    );
    expect(both.body).toEqual({
      data: { b: first.body.data!.b, a: first.body.data!.a },
      extensions: { idempotency: { replayed: ['b', 'a'] } },
    });
    // A refusal is no replay.
    const refused = await answer('mutation { a: createTransfer(amount: 121) { id } }', 'marker');
    expect(refused.body.extensions).toBeUndefined();
  });

  it('covers the mutations of a resolver class with @Idempotent() on it, not its queries', async () => {
    const open = 'mutation { openAccount(owner: "ada") }';
    const first = await answer(open, 'account-1');
    expectReplayOf(await answer(open, 'account-1'), first, ['openAccount']);
    const missing = await answer(open);
    expect(missing.body.errors![0].extensions).toEqual({ code: 'key_missing', status: 400 });
    const opened = await answer('{ openedAccounts }');
    expect(opened.body).toEqual({ data: { openedAccounts: first.body.data!.openAccount } });
  });

  it('runs atomic phases: a retry after a failed phase resumes after the committed one', async () => {
    const query = 'mutation { settleTransfer(amount: 116) { id note } }';
    const failed = await answer(query, 'settle');
    expect(failed.body.errors![0]).toMatchObject({
      message: 'The bank is down',
      extensions: { code: 'retry_later', status: 503, retryAfter: 1 },
    });
    const settled = await answer(query, 'settle');
    expect(settled.body.data!.settleTransfer).toEqual({ id: expect.any(Number), note: 'settled' });
    expectReplayOf(await answer(query, 'settle'), settled, ['settleTransfer']);
    // The first phase ran once: the retry took its stored result.
    const runs = await answer('{ recordedRuns(amount: 116) }');
    expect(runs.body.data!.recordedRuns).toBe(1);
    expect(await rows(116)).toBe(1);
  });

  it('reads the key from an argument (keyFrom: { arg }), not from the header', async () => {
    const query = (key: string) =>
      `mutation { createTransferByArg(amount: 112, idempotencyKey: "${key}") { id } }`;
    const first = await answer(query('arg-1'), 'header-1');
    expect(first.body.errors).toBeUndefined();
    const again = await answer(query('arg-1'), 'header-2');
    expectReplayOf(again, first, ['createTransferByArg']);
    expect(await rows(112)).toBe(1);
    await answer(query('arg-2'), 'header-1');
    expect(await rows(112)).toBe(2);
  });

  it.each([
    [
      'no argument',
      'mutation { createTransferByArg(amount: 113) { id } }',
      {
        message:
          'The idempotencyKey argument is required on this mutation; send one key per operation.',
        extensions: { code: 'key_missing', status: 400 },
      },
    ],
    [
      'a key with a space',
      'mutation { createTransferByArg(amount: 113, idempotencyKey: "a b") { id } }',
      {
        message:
          'The idempotencyKey argument is invalid: it must be visible ASCII characters only (no spaces).',
        extensions: { code: 'key_invalid', status: 400 },
      },
    ],
  ])('refuses an argument key: %s', async (_name, query, error) => {
    const res = await answer(query, 'header-key');
    expect(res.body.errors).toEqual([
      { ...error, locations: [{ line: 1, column: 12 }], path: ['createTransferByArg'] },
    ]);
    expect(await rows(113)).toBe(0);
  });

  describe('refused at start-up', () => {
    it.each([
      [
        'on a query',
        ReadsResolver,
        "@Idempotent() on ReadsResolver.balance: a GraphQL query is safe by GraphQL's",
      ],
      [
        'on a subscription',
        EventsResolver,
        '@Idempotent() on EventsResolver.transferMade: a GraphQL subscription is a stream of events',
      ],
      [
        'on a field resolver',
        FieldsResolver,
        '@Idempotent() on FieldsResolver.fee: a @ResolveField() runs once per object of an answer',
      ],
    ])('%s', async (_name, resolver, message) => {
      await expect(startGraphqlApp(database.url, driver, [resolver])).rejects.toThrow(message);
    });
  });
});
