import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { unwrapResolverError } from '@apollo/server/errors';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type GraphQLFormattedError } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 39b: Apollo's `formatError` that maps a PostgreSQL unique violation (the driver
 * error's `code` '23505') to the API's error answers the first call with the API's error and
 * every retry of the key with the raw SQL message: the replay keeps the error's message and
 * name, not the driver's `code`.
 *
 * App: Apollo (Express). `createTransfer(reference)` is `@Idempotent()` and inserts into
 * `transfers`, whose `reference` is UNIQUE: a reference used before fails the INSERT with
 * PostgreSQL's 23505 (a final error: its effects roll back, it is stored and replayed,
 * lib/transaction/failure.ts:70-71). The app's `formatError`, the Apollo docs' idiom, maps it
 * by the original error's `code`: `unwrapResolverError(error).code === '23505'` ->
 * `{ message: 'This reference is already used', extensions: { code: 'DUPLICATE_REFERENCE' } }`
 * (and never shows SQL text to clients).
 * What happens: the first call's error is pg's `DatabaseError` (its `code`, `constraint`,
 * `detail`): mapped. It is stored as `{ kind: 'error', message, name: 'error' }`
 * (lib/graphql/field-answer.ts:109-133 keeps message, name, extensions, statusCode and an
 * HttpException's status and response, nothing else); the replay is `new Error(message)`
 * (lib/graphql/thrown-error.ts:16-22) with no `code`: `formatError` passes it on, and every
 * retry of the key gets `duplicate key value violates unique constraint
 * "transfers_reference_key"`, code INTERNAL_SERVER_ERROR: another answer than the first, and
 * the SQL text the app keeps from clients. graphql.md's stated limit is about error classes
 * ("a filter that maps the app's own error classes"); this is a property of the driver's
 * error, read as Apollo's docs show.
 * Expected: the retry's answer is the first one (byte for byte, but for the replay marker).
 * Control: the same mutation without `@Idempotent()`: its retry meets the same 23505, mapped
 * the same way.
 * Severity: medium (no effect doubled; every retry of the key gets another error than the
 * first answer, for ever, with the database's text in it).
 */
let pool: Pool;

@ObjectType()
class Transfer {
  @Field()
  reference!: string;
}

@Resolver(() => Transfer)
class TransfersResolver {
  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Transfer, { nullable: true })
  @Idempotent()
  async createTransfer(@Args('reference') reference: string): Promise<Transfer> {
    await pool.query('INSERT INTO transfers (reference) VALUES ($1)', [reference]);
    return { reference };
  }

  /** The control: the same without the library. */
  @Mutation(() => Transfer, { nullable: true })
  async createTransferPlain(@Args('reference') reference: string): Promise<Transfer> {
    await pool.query('INSERT INTO transfers (reference) VALUES ($1)', [reference]);
    return { reference };
  }
}

/** The app's error mapping: a unique violation is the API's DUPLICATE_REFERENCE. */
function formatError(formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError {
  const original = unwrapResolverError(error) as { code?: unknown } | undefined;
  if (original?.code === '23505') {
    return {
      message: 'This reference is already used',
      path: formatted.path,
      extensions: { code: 'DUPLICATE_REFERENCE' },
    };
  }
  return formatted;
}

describe('adversary 39b: formatError by the driver error code, on a replay (Apollo)', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          graphiql: false,
          includeStacktraceInErrorResponses: false,
          formatError,
        }),
      ],
      providers: [TransfersResolver],
    })
    class TransfersModule {}
    fixture = await startPoolApp('adv39b_formaterror', {
      module: TransfersModule,
      adapter: 'express',
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query(
          'CREATE TABLE transfers (id serial PRIMARY KEY, reference text NOT NULL UNIQUE)',
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = async (field: string, key: string, reference: string) => {
    const answer = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ query: `mutation { ${field}(reference: "${reference}") { reference } }` });
    const body = answer.body as { extensions?: unknown };
    // The replay marker is the one documented difference.
    delete body.extensions;
    return { status: answer.status, body: body as unknown };
  };

  async function refusedTwice(field: string, reference: string) {
    await fixture.admin.query('INSERT INTO transfers (reference) VALUES ($1)', [reference]);
    const first = await send(field, `${field}-dup`, reference);
    const retried = await send(field, `${field}-dup`, reference);
    return { first, retried };
  }

  const mapped = (field: string) => ({
    status: 200,
    body: {
      data: { [field]: null },
      errors: [
        {
          message: 'This reference is already used',
          path: [field],
          extensions: { code: 'DUPLICATE_REFERENCE' },
        },
      ],
    },
  });

  it('control: without the library, the retry meets the same violation, mapped the same', async () => {
    const { first, retried } = await refusedTwice('createTransferPlain', 'ref-plain');
    expect(first).toEqual(mapped('createTransferPlain'));
    expect(retried).toEqual(first);
  });

  it('the retry of the key gets the first answer again, not the SQL text', async () => {
    const { first, retried } = await refusedTwice('createTransfer', 'ref-keyed');
    expect(first).toEqual(mapped('createTransfer'));
    expect(retried).toEqual(first);
  });
});
