import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 37b: a resolver that throws a value that is no `Error` (the payment provider's
 * JSON error body as it came, or its message as a string) answers its retries another error
 * than the first call's.
 *
 * App: Apollo (Express) and Mercurius (Fastify); `@Idempotent()` on `pay` (key in the
 * `Idempotency-Key` header), which inserts its row, then rethrows the provider's decline as
 * it came: `throw body` (`{ code: 'card_declined', message: ... }`, as `throw await
 * response.json()` does), or `throw message`.
 * What happens: the first call's answer is GraphQL's own for a thrown value that is no Error
 * (graphql-js `locatedError`: `Unexpected error value: { code: "card_declined", ... }`). The
 * library stores it as `String(thrown)` (lib/graphql/field-answer.ts:95): `[object Object]`
 * for the body, and the bare message for the string; a replay throws `new Error(that)`. The
 * retry's answer is not the first call's: `[object Object]`, the provider's code gone, or a
 * message the first answer did not have.
 * Expected: the replay is the first answer, byte for byte (docs/guides/graphql.md: "The
 * answers are the same bytes when the operation is, but for the replay marker"): the value
 * stored as GraphQL wrote it (its `Unexpected error value: ...` message), or as JSON.
 * Control: the same decline thrown as an `Error`: the replay is the first answer.
 * Severity: low (nothing runs twice; the retry's error is another text, for the body one that
 * has lost the provider's code the client may branch on).
 */
let pool: Pool;

/** What the payment provider answered, as its JSON body. */
const declinedBody = { code: 'card_declined', message: 'Your card was declined.' };

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

  /** Rethrows the provider's error as it came: its JSON body, or its message as a string. */
  @Mutation(() => Payment, { nullable: true })
  @Idempotent()
  async pay(@Args('ref') ref: string, @Args('as') as: string): Promise<Payment> {
    await pool.query('INSERT INTO payments (ref) VALUES ($1)', [ref]);
    if (as === 'body') throw { ...declinedBody };
    if (as === 'string') throw declinedBody.message;
    throw new Error(declinedBody.message);
  }
}

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
      });
}

describe.each(GRAPHQL_DRIVERS)(
  'adversary 37b: a thrown value that is no Error, on %s',
  (driver) => {
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
      fixture = await startPoolApp(`adv37b_nonerror_${driver}`, {
        module: PaymentsModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE payments (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    /** The answer's status and body, the replay marker taken out. */
    const send = async (ref: string, as: string) => {
      const answer = await request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', ref)
        .timeout(5_000)
        .send({ query: `mutation { pay(ref: "${ref}", as: "${as}") { ref } }` });
      const body = answer.body as { extensions?: Record<string, unknown> };
      delete body.extensions?.idempotency;
      if (body.extensions && Object.keys(body.extensions).length === 0) delete body.extensions;
      return { status: answer.status, body: JSON.stringify(body) };
    };

    async function run(ref: string, as: string) {
      const first = await send(ref, as);
      const again = await send(ref, as);
      const rows = await fixture.admin.query(
        'SELECT count(*)::int AS n FROM payments WHERE ref = $1',
        [ref],
      );
      return { first, again, kept: (rows.rows[0] as { n: number }).n };
    }

    it('control: an Error: the replay is the first answer', async () => {
      const { first, again, kept } = await run(`${driver}-error`, 'error');
      expect(first.body).toContain('Your card was declined.');
      expect({ again, kept }).toEqual({ again: first, kept: 0 });
    });

    it("the provider's JSON body thrown: the replay must be the first answer", async () => {
      const { first, again, kept } = await run(`${driver}-body`, 'body');
      expect(first.body).toContain('card_declined');
      expect({ again, kept }).toEqual({ again: first, kept: 0 });
    });

    it("the provider's message thrown as a string: the replay must be the first answer", async () => {
      const { first, again, kept } = await run(`${driver}-string`, 'string');
      expect({ again, kept }).toEqual({ again: first, kept: 0 });
    });
  },
);
