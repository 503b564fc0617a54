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
 *
 * Fixed: the start-up check reads every keyed mutation's arguments from the built schema and
 * refuses a key argument with a default (`keyArgProblem` in lib/routes/route-problem.ts). The
 * test was split (the refusal stops the whole app, so the control has an app of its own).
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

/** The misconfiguration: a key argument with a default (its own resolver, its own app). */
@Resolver()
class DefaultedResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Int)
  @Idempotent({ keyFrom: { arg: 'key' }, required: false })
  chargeDefaulted(
    @Args('key', { type: () => String, nullable: true, defaultValue: 'none' }) _key: string | null,
    @Args('amount', { type: () => Int }) amount: number,
  ): number {
    runs += 1;
    return amount;
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

  /** Starts an app of `resolver`; its start-up error, if it was refused. */
  async function start(resolver: new () => object, label: string): Promise<unknown> {
    @Module({
      imports: [
        IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
        graphqlModule(driver),
      ],
      providers: [resolver],
    })
    class ChargesModule {}
    try {
      fixture = await startPoolApp(`adv71_key_default_${label}_${driver}`, {
        module: ChargesModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (admin) => {
          await admin.query('CREATE TABLE charges (id serial PRIMARY KEY, amount int NOT NULL)');
        },
      });
      return undefined;
    } catch (error) {
      return error;
    }
  }

  afterEach(async () => {
    await fixture?.close();
    fixture = undefined;
  });

  const send = (query: string) =>
    request(fixture!.app.getHttpServer()).post('/graphql').timeout(5_000).send({ query });

  it('the defaulted key argument is refused at start-up, saying why', async () => {
    // Was: started, and the second client's own keyless charge was answered with the first
    // one's replayed (extensions { idempotency: { replayed: ['chargeDefaulted'] } }).
    const error = await start(DefaultedResolver, 'defaulted');
    expect(String(error)).toContain(
      "@Idempotent() on DefaultedResolver.chargeDefaulted: keyFrom: { arg: 'key' } has a " +
        'default value in the schema ("none")',
    );
  }, 60_000);

  it('control: the key argument without a default, two keyless calls both run', async () => {
    expect(await start(ChargesResolver, 'plain')).toBeUndefined();
    const before = runs;
    const first = await send('mutation { chargePlain(amount: 7) }');
    const second = await send('mutation { chargePlain(amount: 7) }');
    expect(first.body.errors).toBeUndefined();
    expect(second.body.errors).toBeUndefined();
    expect(second.body.extensions).toBeUndefined();
    expect(runs - before).toBe(2);
  }, 60_000);
});
