import { HttpException, HttpStatus, Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { unwrapResolverError } from '@apollo/server/errors';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type GraphQLFormattedError } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 40b: an app's `HttpException` that carries a plain property of its own (the PSP's
 * `declineCode`), read by Apollo's `formatError`, answers the first call with it and every
 * retry of the key without it: round 39 keeps an error's own plain properties on a replay,
 * except an `HttpException`'s.
 *
 * App: Apollo (Express). `payInvoice(invoice)` is `@Idempotent()`; a declined card throws the
 * app's `PaymentDeclinedException extends HttpException` (402, `readonly declineCode` a
 * constructor property, as Nest's docs write custom exceptions). The app's `formatError` puts
 * it in the error's extensions for its clients: `unwrapResolverError(error).declineCode` ->
 * `extensions.declineCode` (a client shows "insufficient funds" vs "card expired").
 * What happens: `fieldError` (lib/graphql/field-answer.ts:131-133) stores an `HttpException`
 * "of its response and status alone": `props` is left out for it; the replay
 * (lib/graphql/thrown-error.ts:17-38) is `new HttpException(response, 402)` with no
 * `declineCode`. `formatError` leaves it out: every retry of the key gets the 402 without
 * `extensions.declineCode`, another answer than the first, for ever. docs/guides/graphql.md
 * ("The resolver's error") says "the error's own plain properties (a driver's `code`,
 * `constraint`) are kept, so a `formatError` that maps ... maps the replay too", with no word
 * that an `HttpException`'s are not.
 * Expected: the retry's answer is the first one (byte for byte, but for the replay marker).
 * Control: the same mutation without `@Idempotent()`: its retry is declined again, mapped the
 * same way.
 * Severity: medium (no effect doubled; every retry of the key gets another error body than the
 * first answer, for ever).
 */
let pool: Pool;

class PaymentDeclinedException extends HttpException {
  constructor(readonly declineCode: string) {
    super('Payment declined', HttpStatus.PAYMENT_REQUIRED);
  }
}

@ObjectType()
class Payment {
  @Field()
  invoice!: string;
}

@Resolver(() => Payment)
class PaymentsResolver {
  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Payment, { nullable: true })
  @Idempotent()
  async payInvoice(@Args('invoice') invoice: string): Promise<Payment> {
    await pool.query('INSERT INTO attempts (invoice) VALUES ($1)', [invoice]);
    throw new PaymentDeclinedException('insufficient_funds');
  }

  /** The control: the same without the library. */
  @Mutation(() => Payment, { nullable: true })
  async payInvoicePlain(@Args('invoice') invoice: string): Promise<Payment> {
    await pool.query('INSERT INTO attempts (invoice) VALUES ($1)', [invoice]);
    throw new PaymentDeclinedException('insufficient_funds');
  }
}

/** The app's error mapping: a declined payment says why, for the client to show. */
function formatError(formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError {
  const original = unwrapResolverError(error) as { declineCode?: unknown } | undefined;
  if (typeof original?.declineCode === 'string') {
    return {
      ...formatted,
      extensions: { ...formatted.extensions, declineCode: original.declineCode },
    };
  }
  return formatted;
}

describe('adversary 40b: formatError reading an HttpException own property, on a replay (Apollo)', () => {
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
      providers: [PaymentsResolver],
    })
    class PaymentsModule {}
    fixture = await startPoolApp('adv40b_http_props', {
      module: PaymentsModule,
      adapter: 'express',
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE attempts (id serial PRIMARY KEY, invoice text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = async (field: string, key: string) => {
    const answer = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ query: `mutation { ${field}(invoice: "inv-1") { invoice } }` });
    const body = answer.body as { extensions?: unknown };
    // The replay marker is the one documented difference.
    delete body.extensions;
    return { status: answer.status, body: body as unknown };
  };

  async function declinedTwice(field: string) {
    const first = await send(field, `${field}-declined`);
    const retried = await send(field, `${field}-declined`);
    return { first, retried };
  }

  const declined = (first: { body: unknown }) =>
    (first.body as { errors?: { extensions?: { declineCode?: unknown } }[] }).errors?.[0]
      ?.extensions?.declineCode;

  it('control: without the library, the retry is declined again, mapped the same', async () => {
    const { first, retried } = await declinedTwice('payInvoicePlain');
    expect(declined(first)).toBe('insufficient_funds');
    expect(retried).toEqual(first);
  });

  it('the retry of the key gets the first answer again, its declineCode included', async () => {
    const { first, retried } = await declinedTwice('payInvoice');
    expect(declined(first)).toBe('insufficient_funds');
    expect(retried).toEqual(first);
  });
});
