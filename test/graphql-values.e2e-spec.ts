import { jest } from '@jest/globals';
import { type INestApplication } from '@nestjs/common';
import {
  Args,
  Field,
  GraphQLISODateTime,
  Int,
  Mutation,
  ObjectType,
  registerEnumType,
  Resolver,
} from '@nestjs/graphql';
import { getDataSourceToken, InjectDataSource } from '@nestjs/typeorm';
import { GraphQLScalarType } from 'graphql';
import { Readable } from 'node:stream';
import request from 'supertest';
import { type DataSource } from 'typeorm';
import { Idempotent } from '../lib/index.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { expectReplayOf } from './support/graphql-replay.js';

// See graphql.e2e-spec.ts: a stand-in lets Mercurius load under jest.
jest.mock('@fastify/static', () => () => undefined);
const { createTransfersTable, GRAPHQL_DRIVERS, startGraphqlApp, TransfersResolver } =
  await import('./support/graphql-app.js');

/** A BigInt scalar whose serialize() takes a bigint only, as many do: a string is refused. */
const Cents = new GraphQLScalarType({
  name: 'Cents',
  serialize(value) {
    if (typeof value !== 'bigint') throw new TypeError(`Cents cannot serialize ${typeof value}`);
    return value.toString();
  },
  parseValue(value) {
    return BigInt(value as string);
  },
});

/**
 * graphql-upload's `Upload` scalar, with what its multipart middleware puts in the variables:
 * a Promise of the file, whose bytes come as a stream. (The test sends the file's text as the
 * variable, for the scalar to wrap, as the middleware would the part's.)
 */
const Upload = new GraphQLScalarType({
  name: 'Upload',
  parseValue(value) {
    return Promise.resolve({
      filename: 'file.txt',
      createReadStream: () => Readable.from([Buffer.from(String(value))]),
    });
  },
  serialize() {
    throw new Error('Upload serialization unsupported.');
  },
});

/** A scalar of raw bytes whose serialize() gives its value back as it is: a Buffer. */
const Bytes = new GraphQLScalarType({
  name: 'Bytes',
  parseValue: (value) => Buffer.from(String(value), 'base64'),
  serialize: (value) => value,
});

enum Priority {
  Low = 1,
  High = 2,
}
registerEnumType(Priority, { name: 'Priority' });

@ObjectType()
class Receipt {
  @Field(() => Int)
  id!: number;

  @Field(() => GraphQLISODateTime)
  issuedAt!: Date;

  @Field(() => Cents)
  total!: bigint;

  @Field(() => Priority)
  priority!: Priority;

  @Field(() => [GraphQLISODateTime])
  reminders!: Date[];
}

/** Only a Date: what most apps have. */
@ObjectType()
class Stamp {
  @Field(() => Int)
  id!: number;

  @Field()
  at!: Date;
}

/** Resolver runs, by amount. */
const runs = new Map<number, number>();

@Resolver(() => Receipt)
class ReceiptsResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async insert(amount: number, note: string): Promise<number> {
    runs.set(amount, (runs.get(amount) ?? 0) + 1);
    const rows = (await this.dataSource.query(
      'INSERT INTO transfers (amount, note) VALUES ($1, $2) RETURNING id',
      [amount, note],
    )) as { id: number }[];
    return rows[0].id;
  }

  /** Answers a class instance with Dates, a bigint and a numeric enum. */
  @Mutation(() => Receipt)
  @Idempotent()
  async issueReceipt(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('at', { type: () => GraphQLISODateTime }) at: Date,
  ): Promise<Receipt> {
    const receipt = new Receipt();
    receipt.id = await this.insert(amount, at.toISOString());
    receipt.issuedAt = at;
    receipt.total = BigInt(amount) * 10_000_000_000n;
    receipt.priority = Priority.High;
    receipt.reminders = [new Date(at.getTime() + 86_400_000)];
    return receipt;
  }

  @Mutation(() => Stamp)
  @Idempotent()
  async stamp(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('at') at: Date,
  ): Promise<Stamp> {
    return { id: await this.insert(amount, at.toISOString()), at };
  }

  /** Takes a file: its bytes are read, and stored with the row. */
  @Mutation(() => Int)
  @Idempotent()
  async attach(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('file', { type: () => Upload }) file: Promise<{ createReadStream(): Readable }>,
  ): Promise<number> {
    const chunks: Buffer[] = [];
    for await (const chunk of (await file).createReadStream()) chunks.push(chunk as Buffer);
    return this.insert(amount, Buffer.concat(chunks).toString());
  }

  @Mutation(() => Int)
  @Idempotent()
  attachBytes(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('bytes', { type: () => Bytes }) bytes: Buffer,
  ): Promise<number> {
    return this.insert(amount, bytes.toString());
  }
}

interface GraphqlAnswer {
  data?: Record<string, unknown> | null;
  errors?: { message: string; path?: string[]; extensions?: Record<string, unknown> }[];
}

describe.each(GRAPHQL_DRIVERS)('GraphQL values that are not JSON, on %s', (driver) => {
  /** The resolvers count by amount: each driver has its own. */
  const base = driver === 'apollo' ? 400 : 500;
  let database: TestDatabase;
  let app: INestApplication;
  /** A second instance: it knows a key only from PostgreSQL. */
  let other: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase(`graphql_values_${driver}`);
    app = await startGraphqlApp(database.url, driver, [TransfersResolver, ReceiptsResolver]);
    await createTransfersTable(app);
    other = await startGraphqlApp(database.url, driver, [TransfersResolver, ReceiptsResolver]);
  });
  afterAll(async () => {
    await app?.close();
    await other?.close();
    await database?.drop();
  });

  const answer = async (
    query: string,
    key: string,
    variables?: Record<string, unknown>,
    to: INestApplication = app,
  ) => {
    const res = await request(to.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .send({ query, variables });
    expect(res.status).toBe(200);
    return { text: res.text, body: res.body as GraphqlAnswer };
  };
  const notes = async (amount: number) =>
    (
      (await app
        .get<DataSource>(getDataSourceToken())
        .query('SELECT note FROM transfers WHERE amount = $1 ORDER BY id', [amount])) as {
        note: string;
      }[]
    ).map((row) => row.note);
  const keys = async (key: string) =>
    (await app
      .get<DataSource>(getDataSourceToken())
      .query('SELECT state FROM idempotency_keys WHERE key = $1', [key])) as unknown[];

  const RECEIPT =
    'mutation Issue($amount: Int!, $at: DateTime!) { issueReceipt(amount: $amount, at: $at) { id issuedAt total priority reminders } }';

  it('answers a Date, a BigInt scalar and an enum as the resolver gave them, and replays the same bytes', async () => {
    const amount = base + 1;
    const at = '2026-03-01T09:30:00.000Z';
    const first = await answer(RECEIPT, `${driver}-receipt`, { amount, at });
    expect(first.body).toEqual({
      data: {
        issueReceipt: {
          id: expect.any(Number),
          issuedAt: at,
          total: `${amount}0000000000`,
          priority: 'High',
          reminders: ['2026-03-02T09:30:00.000Z'],
        },
      },
    });
    const again = await answer(RECEIPT, `${driver}-receipt`, { amount, at });
    expectReplayOf(again, first, ['issueReceipt']);
    const elsewhere = await answer(RECEIPT, `${driver}-receipt`, { amount, at }, other);
    expectReplayOf(elsewhere, first, ['issueReceipt']);
    expect(runs.get(amount)).toBe(1);
    expect(await notes(amount)).toEqual([at]);
  });

  it('replays what the first call selected, and refuses on its own field what it did not', async () => {
    const amount = base + 6;
    const at = '2026-03-01T09:30:00.000Z';
    const select = (set: string) =>
      `mutation Issue($amount: Int!, $at: DateTime!) { issueReceipt(amount: $amount, at: $at) ${set} }`;
    const key = `${driver}-selection`;
    const first = await answer(select('{ id total }'), key, { amount, at });
    expect(first.body).toEqual({
      data: { issueReceipt: { id: expect.any(Number), total: `${amount}0000000000` } },
    });
    // The same fields under an alias and in a fragment: the stored values.
    const aliased = await answer(select('{ sum: total ... on Receipt { id } }'), key, {
      amount,
      at,
    });
    expect(aliased.body.data).toEqual({
      issueReceipt: {
        sum: `${amount}0000000000`,
        id: (first.body.data!.issueReceipt as { id: number }).id,
      },
    });
    // A field the first call did not select has no stored value: an error on that field
    // (non-null, so its parent is null too), never a made-up value.
    const more = await answer(select('{ id total priority }'), key, { amount, at });
    expect(more.body.data).toBeNull();
    expect(more.body.errors).toEqual([
      expect.objectContaining({
        message: expect.stringContaining(
          'The field Receipt.priority was not selected by the first call with this idempotency key',
        ) as string,
        path: ['issueReceipt', 'priority'],
        extensions: expect.objectContaining({ code: 'field_not_stored' }) as object,
      }),
    ]);
    expect(runs.get(amount)).toBe(1);
  });

  const STAMP =
    'mutation Stamp($amount: Int!, $at: DateTime!) { stamp(amount: $amount, at: $at) { id at } }';

  it('answers a type with a Date field (not data: null), and replays the same bytes', async () => {
    const amount = base + 5;
    const at = '2026-03-01T09:30:00.000Z';
    const first = await answer(STAMP, `${driver}-stamp`, { amount, at });
    expect(first.body).toEqual({ data: { stamp: { id: expect.any(Number), at } } });
    expectReplayOf(await answer(STAMP, `${driver}-stamp`, { amount, at }), first, ['stamp']);
    expectReplayOf(await answer(STAMP, `${driver}-stamp`, { amount, at }, other), first, ['stamp']);
    expect(runs.get(amount)).toBe(1);
  });

  it('fingerprints a Date argument by its value: another date under the key is a key_mismatch', async () => {
    const amount = base + 2;
    const first = await answer(STAMP, `${driver}-dates`, {
      amount,
      at: '2026-03-01T09:30:00.000Z',
    });
    expect(first.body.errors).toBeUndefined();
    const other = await answer(STAMP, `${driver}-dates`, {
      amount,
      at: '2027-01-01T00:00:00.000Z',
    });
    expect(other.body.errors).toEqual([
      expect.objectContaining({
        path: ['stamp'],
        extensions: { code: 'key_mismatch', status: 422 },
      }),
    ]);
    expect(runs.get(amount)).toBe(1);
  });

  it.each([
    [
      'an Upload (a Promise of a stream)',
      'mutation Attach($amount: Int!, $file: Upload!) { attach(amount: $amount, file: $file) }',
      'attach',
      (n: number) => ({ file: `contents of file ${n}` }),
      'the argument file is a Promise (an upload, say) that the scalar Upload cannot write, not JSON',
    ],
    [
      'a Buffer',
      'mutation Attach($amount: Int!, $bytes: Bytes!) { attachBytes(amount: $amount, bytes: $bytes) }',
      'attachBytes',
      (n: number) => ({ bytes: Buffer.from(`bytes ${n}`).toString('base64') }),
      'the argument bytes is a Buffer, not JSON',
    ],
  ])(
    'refuses %s argument, before the key is claimed: another value under the key never gets the first answer',
    async (_name, query, field, value, reason) => {
      const amount = base + (field === 'attach' ? 3 : 4);
      const key = `${driver}-${field}`;
      for (const n of [1, 2]) {
        const res = await answer(query, key, { amount, ...value(n) });
        expect(res.body.data).toBeNull();
        expect(res.body.errors).toEqual([
          expect.objectContaining({
            message: expect.stringContaining(reason),
            path: [field],
            extensions: { code: 'request_invalid', status: 400 },
          }),
        ]);
        expect(res.body.errors![0].message).toMatch(
          /^The field's arguments cannot be fingerprinted: /,
        );
      }
      expect(await notes(amount)).toEqual([]);
      expect(await keys(`${key}:${field}`)).toEqual([]);
    },
  );
});
