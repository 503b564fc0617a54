import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { Args, GraphQLModule, Int, Mutation, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 71: a key argument with a default value in the schema
 * (`@Args('key', { nullable: true, defaultValue: 'none' })`, with `keyFrom: { arg: 'key' }`
 * and `required: false`, the shape of "the key is optional"). Every call that leaves the key
 * out is keyed by the SAME key, 'none': the second client's distinct charge (same amount) is
 * answered with the first client's payment replayed and never runs (a lost charge, silently,
 * with a "replayed" marker); with another amount it is refused with key_mismatch (422), a
 * key the client never sent. Nothing says so at start-up.
 *
 * Why: since round 70 the key is read from the arguments as graphql-js coerces them
 * (`argumentValues` in lib/graphql/read-field.ts: `getArgumentValues`), which fills in the
 * schema's default for an argument left out; `readKey` cannot tell a default from a key the
 * client sent. The start-up checks (`keyArgProblem`, `onApplicationBootstrap`) look at the
 * argument's name only, never at its default.
 *
 * Expected (the promise: "a misconfiguration fails at start-up"; "a mutation with a key runs
 * its effects at most once" is for the client's key, not for a key no client sent): either the
 * app refuses to start (a key argument with a default), or a call that sends no key is read as
 * keyless (runs unkeyed with required: false; key_missing with required: true).
 *
 * Severity: medium (a server-side default turns every keyless call into one shared record:
 * later distinct mutations are dropped and answered with someone else's data within the tenant).
 *
 * Control (passes): the same argument without a default: two keyless calls both run.
 */
let pool: Pool;
let runs = 0;

@Resolver()
class ChargesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async insert(amount: number): Promise<number> {
    runs += 1;
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO charges (amount) VALUES ($1) RETURNING id',
      [amount],
    );
    return rows[0].id;
  }

  @Mutation(() => Int)
  @Idempotent({ keyFrom: { arg: 'key' }, required: false })
  chargeDefaulted(
    @Args('key', { type: () => String, nullable: true, defaultValue: 'none' }) _key: string | null,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<number> {
    return this.insert(amount);
  }

  /** Control: no default. */
  @Mutation(() => Int)
  @Idempotent({ keyFrom: { arg: 'key' }, required: false })
  chargePlain(
    @Args('key', { type: () => String, nullable: true }) _key: string | null,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<number> {
    return this.insert(amount);
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

describe.each(GRAPHQL_DRIVERS)('adversary 71: a key argument with a default, on %s', (driver) => {
  let fixture: PoolApp | undefined;
  let startError: unknown;

  beforeAll(async () => {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [ChargesResolver],
    })
    class ChargesModule {}
    try {
      fixture = await startPoolApp(`adv71_key_default_${driver}`, {
        module: ChargesModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE charges (id serial PRIMARY KEY, amount int NOT NULL)');
        },
      });
    } catch (error) {
      startError = error;
    }
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (query: string) =>
    request(fixture!.app.getHttpServer()).post('/graphql').timeout(5_000).send({ query });

  it('two keyless calls of the defaulted key argument: not one shared record', async () => {
    if (startError !== undefined) return; // refused at start-up: the misconfiguration is told
    const before = runs;
    const amount = driver === 'apollo' ? 5 : 6;
    const first = await send(`mutation { chargeDefaulted(amount: ${amount}) }`);
    expect(first.body.errors).toBeUndefined();
    // A second client's own charge, no key sent: it must run (unkeyed), not be a replay.
    const second = await send(`mutation { chargeDefaulted(amount: ${amount}) }`);
    // Observed: extensions { idempotency: { replayed: ['chargeDefaulted'] } }, one run.
    expect(second.body.extensions).toBeUndefined();
    expect(runs - before).toBe(2);
    // A third, another amount: observed key_mismatch (422) for a key it never sent.
    const third = await send(`mutation { chargeDefaulted(amount: ${amount + 100}) }`);
    expect(third.body.errors).toBeUndefined();
  });

  it('control: the key argument without a default, two keyless calls both run', async () => {
    expect(startError).toBeUndefined();
    const before = runs;
    const first = await send('mutation { chargePlain(amount: 7) }');
    const second = await send('mutation { chargePlain(amount: 7) }');
    expect(first.body.errors).toBeUndefined();
    expect(second.body.errors).toBeUndefined();
    expect(second.body.extensions).toBeUndefined();
    expect(runs - before).toBe(2);
  });
});
