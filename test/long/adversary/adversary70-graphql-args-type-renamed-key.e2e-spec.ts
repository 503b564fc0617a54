import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import {
  Args,
  ArgsType,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  Query,
  Resolver,
} from '@nestjs/graphql';
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
 * Adversary, round 70: a mutation whose arguments are an `@ArgsType()` class (`@Args() args:
 * ChargeArgs`, Nest's documented way to group arguments) with the key field renamed in the
 * schema (`@Field({ name: 'idempotencyKey' }) key`), and `keyFrom: { arg: 'idempotencyKey' }`
 * naming the GraphQL argument, as the docs say ("the idempotencyKey argument"). The client
 * sends `charge(idempotencyKey: "k", amount: 5)`, a valid call, and is refused with
 * key_missing ("The idempotencyKey argument is required on this mutation") on every call;
 * with `required: false` every call runs unkeyed: a retry charges twice, silently.
 *
 * Why: @nestjs/graphql 14 rewrites the resolver's args object onto the class's property names
 * (`createArgsMapper` / `withMappedArgs` in resolvers-explorer) BEFORE the interceptor runs,
 * so `context.getArgs()[1]` is `{ key, amount }`. lib/graphql/read-field.ts reads the key as
 * `field.args[arg]` (the mapped args), while the fingerprint reads the schema's names
 * (`getArgumentValues`). The start-up check (`argNamesOf`) skips an `@ArgsType()` class, so
 * nothing says so at start-up either.
 *
 * Expected: the key read from the argument the schema has (info's field node / the
 * un-mapped args): one run, the retry replays; or at the least, a refusal at start-up.
 *
 * Control (passes): the same class without the rename; the retry replays.
 *
 * Severity: medium (a valid, documented Nest shape; with required: false the promise, "at
 * most once", is silently lost; with required on, the mutation cannot be called at all).
 *
 * Fixed: the key argument is read by its schema name from the arguments as graphql-js coerces
 * them (`argumentValues` in lib/graphql/read-field.ts), not from Nest's renamed args.
 */
let pool: Pool;
let runs = 0;

@ArgsType()
class RenamedArgs {
  @Field({ name: 'idempotencyKey' })
  key!: string;

  @Field(() => Int)
  amount!: number;
}

@ArgsType()
class PlainArgs {
  @Field()
  idempotencyKey!: string;

  @Field(() => Int)
  amount!: number;
}

@Resolver()
class ChargesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async insert(amount: number): Promise<number> {
    runs++;
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO charges (amount) VALUES ($1) RETURNING id',
      [amount],
    );
    return rows[0].id;
  }

  @Mutation(() => Int)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  charge(@Args() args: RenamedArgs): Promise<number> {
    return this.insert(args.amount);
  }

  @Mutation(() => Int)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' }, required: false })
  chargeOptional(@Args() args: RenamedArgs): Promise<number> {
    return this.insert(args.amount);
  }

  /** Control: no rename. */
  @Mutation(() => Int)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  chargePlain(@Args() args: PlainArgs): Promise<number> {
    return this.insert(args.amount);
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

describe.each(GRAPHQL_DRIVERS)('adversary 70: @ArgsType() renamed key arg, on %s', (driver) => {
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
      fixture = await startPoolApp(`adv70_args_renamed_${driver}`, {
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

  it('a valid call with the key in the renamed argument runs, and its retry replays', async () => {
    expect(startError).toBeUndefined();
    const before = runs;
    const query = `mutation { charge(idempotencyKey: "r-${driver}", amount: 5) }`;
    const first = await send(query);
    // Observed: errors [{ extensions.code: 'key_missing' }] (the argument the client sent).
    expect(first.body.errors).toBeUndefined();
    const retry = await send(query);
    expect(retry.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['charge'] } },
    });
    expect(runs - before).toBe(1);
  });

  it('required: false: a retry with the same key does not run twice silently', async () => {
    const before = runs;
    const query = `mutation { chargeOptional(idempotencyKey: "o-${driver}", amount: 6) }`;
    const first = await send(query);
    const retry = await send(query);
    expect(first.body.errors).toBeUndefined();
    // Observed: two runs, two rows, no error, no replay marker.
    expect(runs - before).toBe(1);
    expect(retry.body.extensions).toEqual({ idempotency: { replayed: ['chargeOptional'] } });
  });

  it('control: the @ArgsType() without the rename replays', async () => {
    const before = runs;
    const query = `mutation { chargePlain(idempotencyKey: "p-${driver}", amount: 7) }`;
    const first = await send(query);
    expect(first.body.errors).toBeUndefined();
    const retry = await send(query);
    expect(retry.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['chargePlain'] } },
    });
    expect(runs - before).toBe(1);
  });
});
