import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { GraphQLError, type GraphQLFormattedError } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 37b: a resolver's error whose `extensions` have no JSON form (an HTTP client's error
 * as its cause, whose request and response point at each other) leaks the field's open
 * transaction and holds the key, and the client is told an error its retry never gets.
 *
 * App: Apollo (Express) and Mercurius (Fastify); `@Idempotent()` on `pay` (key in the
 * `Idempotency-Key` header), which writes its row, then fails as the payment gateway declined:
 * `new GraphQLError('payment declined', { extensions: { code, cause: gatewayError } })`, the
 * gateway client's error kept for the logs. The app's formatter (Apollo's `formatError`,
 * Mercurius' `errorFormatter`) sends out the message, the path and the code alone, as an app
 * does to keep internals from its clients: without the library, the answer is the decline.
 * What happens: `failed()` (lib/graphql/run-field.ts:263) writes the error with `fieldError()`,
 * whose `JSON.parse(JSON.stringify(extensions))` (lib/graphql/field-answer.ts:101)
 * throws on the cycle before the transaction is rolled back (run-field.ts:293) or the key
 * given back or stored. The field answers that TypeError (Apollo: INTERNAL_SERVER_ERROR;
 * Mercurius: "Converting circular structure to JSON"), which is not the key's answer: the
 * retry gets `key_in_progress`, and after the lease the resolver runs again, to leak again.
 * The resolver's transaction stays open, `idle in transaction`, its connection never given
 * back to the pool (its row locks held; `pool.max` such declines and the app has no
 * connection left; the pool can no longer end).
 * Expected: the decline, stored (with what of its extensions has a JSON form, or as a value
 * that cannot be stored is: an error stored as the answer) and replayed; the transaction
 * rolled back and its connection given back.
 * Control: the same error without `@Idempotent()` (the driver and the app's formatter answer
 * the decline), and the same resolver whose error carries its code alone (stored, replayed).
 * Severity: high (a connection and its open transaction leaked per call; the client told an
 * error its retry never gets, the key held until the lease ends, then run again).
 */
let pool: Pool;
const calls: Record<string, number> = {};

/** What an HTTP client's error looks like: its request and response point at each other. */
function gatewayError(): Record<string, unknown> {
  const request: Record<string, unknown> = { method: 'POST', path: '/charges' };
  const response: Record<string, unknown> = { status: 402, request };
  request.response = response;
  return { message: 'card declined', request, response };
}

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

  @Mutation(() => Payment, { nullable: true })
  @Idempotent()
  async pay(@Args('ref') ref: string, @Args('withCause') withCause: boolean): Promise<Payment> {
    calls[ref] = (calls[ref] ?? 0) + 1;
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    throw new GraphQLError('payment declined', {
      extensions: withCause
        ? { code: 'PAYMENT_DECLINED', cause: gatewayError() }
        : { code: 'PAYMENT_DECLINED' },
    });
  }

  /** The same without `@Idempotent()`: the control without the library. */
  @Mutation(() => Payment, { nullable: true })
  async payPlain(
    @Args('ref') ref: string,
    @Args('withCause') withCause: boolean,
  ): Promise<Payment> {
    return this.pay(ref, withCause);
  }
}

/** The app's formatter: only the code goes out (never the gateway's internals). */
const publicOnly = (formatted: GraphQLFormattedError): GraphQLFormattedError => ({
  message: formatted.message,
  path: formatted.path,
  extensions: { code: formatted.extensions?.code },
});

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
        formatError: publicOnly,
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
        errorFormatter: (execution) => ({
          statusCode: 200,
          response: {
            data: execution.data ?? null,
            errors: (execution.errors ?? []).map((error) => publicOnly(error.toJSON())),
          },
        }),
      });
}

describe.each(GRAPHQL_DRIVERS)('adversary 37b: error extensions without JSON, on %s', (driver) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [PaymentsResolver],
    })
    class PaymentsModule {}
    fixture = await startPoolApp(`adv37b_nojson_${driver}`, {
      module: PaymentsModule,
      adapter: driver === 'apollo' ? 'express' : 'fastify',
      max: 2,
      usePool: (started) => (pool = started),
      setup: async (owner) => {
        await owner.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    if (!fixture) return;
    await fixture.app.close();
    // The leaked transaction's session is ended (as a DBA would). Its client is never given
    // back to the pool, whose end() would wait for it for ever: the database is dropped
    // without it.
    await fixture.admin.query(
      `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
        WHERE datname = current_database() AND pid <> pg_backend_pid()`,
    );
    await fixture.admin.end();
    await fixture.database.drop();
  }, 10_000);

  const send = async (ref: string, withCause: boolean, field = 'pay') => {
    const answer = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', ref)
      .timeout(3_000)
      .send({ query: `mutation { pay: ${field}(ref: "${ref}", withCause: ${withCause}) { ref } }` })
      .then(
        (a) => a,
        (e: Error) => ({ body: { errors: [{ message: e.message }] } }),
      );
    const body = answer.body as {
      data?: { pay?: unknown } | null;
      errors?: { message: string; extensions?: { code?: unknown } }[];
    };
    return body.data?.pay ?? body.errors?.[0]?.extensions?.code ?? body.errors?.[0]?.message;
  };

  async function run(ref: string, withCause: boolean, field = 'pay') {
    const first = await send(ref, withCause, field);
    const again = await send(ref, withCause, field);
    const rows = await fixture.admin.query(
      'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
      [ref],
    );
    const idle = await fixture.admin.query(
      `SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'`,
    );
    return {
      first,
      again,
      ran: calls[ref] ?? 0,
      kept: (rows.rows[0] as { n: number }).n,
      idleInTransaction: (idle.rows[0] as { n: number }).n,
    };
  }

  const declined = {
    first: 'PAYMENT_DECLINED',
    again: 'PAYMENT_DECLINED',
    ran: 1,
    kept: 0,
    idleInTransaction: 0,
  };

  it('control: without the library, the gateway error goes out as the app formats it', async () => {
    expect(await run(`${driver}-plain`, true, 'payPlain')).toEqual({
      ...declined,
      // No transaction without the library: each call's row stays.
      ran: 2,
      kept: 2,
    });
  });

  it('control: the error carries its code alone: stored and replayed', async () => {
    expect(await run(`${driver}-code-alone`, false)).toEqual(declined);
  });

  it('the error carries the gateway error: the same answer, stored and replayed', async () => {
    expect(await run(`${driver}-with-cause`, true)).toEqual(declined);
  });
});
