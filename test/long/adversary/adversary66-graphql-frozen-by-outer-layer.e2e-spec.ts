import { jest } from '@jest/globals';
import {
  type CallHandler,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
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
import { type Pool } from 'pg';
import { map, type Observable } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 66: an interceptor outside `@Idempotent()` that freezes the mutation's
 * value as it goes out (`Object.freeze(value)`: a read-model cache or an event bus handed the
 * answer, made immutable so that no later layer changes what was cached) breaks the FIRST
 * answer of a mutation whose value has a field given by a getter (`@Field() get label()`): the
 * first answer is `data: null` with "'ownKeys' on proxy: trap returned extra keys but proxy
 * target is non-extensible" for a mutation that committed. Its replay, and the same app
 * without the library, answer the receipt.
 *
 * What happens: storing reads `label` through its getter, so the first answer is
 * `over(source, replaced)` (lib/graphql/wire-value.ts): a Proxy whose target is an empty
 * stand-in and which has no `preventExtensions`/`isExtensible` trap. `Object.freeze(proxy)`
 * makes the stand-in non-extensible, then lists the Proxy's own keys: its `ownKeys` trap
 * answers the value's keys, which a non-extensible target does not have, and the Proxy
 * invariant throws a TypeError. The Proxy stays broken after that: every `Object.keys()`,
 * spread or serializer on it throws the same. `Object.seal()` and `Object.preventExtensions()`
 * (then any key listing) fail alike; `Object.isFrozen()` of a frozen value's first answer says
 * false.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): the first answer is "the
 * resolver's value [...] seen through a Proxy [...]; its class, keys, getters, setters and
 * methods [...] are its own"; the first answer and its replay the same bytes but the replay
 * marker, as without the library.
 *
 * Controls (pass): the same receipt without `@Idempotent()`; a receipt whose label is plain
 * data (no getter, no Proxy) with `@Idempotent()`; the getter receipt's replay.
 *
 * Severity: medium (a committed mutation answered as an error on its first answer, in an app
 * that freezes what it caches; the retry gets the answer).
 *
 * Fixed: the first answer's Proxy has `preventExtensions`/`isExtensible` traps: made non-extensible
 * (by the app before, or an outer layer after), its stand-in is settled with a copy of the
 * value's own properties (read fields as answered) and made so too, and the value is frozen
 * with it (`over` in lib/graphql/wire-value.ts).
 */
let pool: Pool;
const frozen: unknown[] = [];

@ObjectType()
class Receipt {
  @Field(() => Int)
  id: number;

  @Field(() => Int)
  amount: number;

  @Field()
  get label(): string {
    return `#${this.id}: ${this.amount} EUR`;
  }

  constructor(id: number, amount: number) {
    this.id = id;
    this.amount = amount;
  }
}

/** The same, its label plain data: nothing the library replaces. */
@ObjectType()
class PlainReceipt {
  @Field(() => Int)
  id: number;

  @Field(() => Int)
  amount: number;

  @Field()
  label: string;

  constructor(id: number, amount: number) {
    this.id = id;
    this.amount = amount;
    this.label = `#${id}: ${amount} EUR`;
  }
}

/** The app's read-model cache: every answer frozen as it is cached, then sent. */
@Injectable()
class FreezeAnswers implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      map((value: unknown) => {
        if (typeof value === 'object' && value !== null) frozen.push(Object.freeze(value));
        return value;
      }),
    );
  }
}

async function insert(amount: number): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO receipts (amount) VALUES ($1) RETURNING id',
    [amount],
  );
  return rows[0].id;
}

@Resolver()
class ReceiptsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Receipt)
  @Idempotent()
  async pay(@Args('amount', { type: () => Int }) amount: number): Promise<Receipt> {
    return new Receipt(await insert(amount), amount);
  }

  /** The same, without @Idempotent(): what the app answers without the library. */
  @Mutation(() => Receipt)
  async payUnkeyed(@Args('amount', { type: () => Int }) amount: number): Promise<Receipt> {
    return new Receipt(await insert(amount), amount);
  }

  @Mutation(() => PlainReceipt)
  @Idempotent()
  async payPlain(@Args('amount', { type: () => Int }) amount: number): Promise<PlainReceipt> {
    return new PlainReceipt(await insert(amount), amount);
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
  'adversary 66: an outer interceptor that freezes the answer, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [ReceiptsResolver, { provide: APP_INTERCEPTOR, useClass: FreezeAnswers }],
      })
      class ReceiptsModule {}
      fixture = await startPoolApp(`adv66_frozen_${driver}`, {
        module: ReceiptsModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE receipts (id serial PRIMARY KEY, amount int NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    const send = (key: string, query: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .timeout(5_000)
        .send({ query });
    const rows = async (amount: number) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM receipts WHERE amount = $1', [amount]))
          .rows[0].count,
      );
    const receipt = (field: string, amount: number) => ({
      data: {
        [field]: {
          id: expect.any(Number),
          amount,
          label: expect.stringMatching(/^#\d+: \d+ EUR$/),
        },
      },
    });

    it('control: without @Idempotent(), the receipt is answered and frozen', async () => {
      const amount = driver === 'apollo' ? 101 : 201;
      const answer = await send(
        `${driver}-unkeyed`,
        `mutation { payUnkeyed(amount: ${amount}) { id amount label } }`,
      );
      expect(answer.body).toEqual(receipt('payUnkeyed', amount));
      expect(frozen.some((value) => Object.isFrozen(value))).toBe(true);
    });

    it('control: a label that is plain data: the first answer and its replay', async () => {
      const amount = driver === 'apollo' ? 102 : 202;
      const query = `mutation { payPlain(amount: ${amount}) { id amount label } }`;
      const first = await send(`${driver}-plain`, query);
      const replay = await send(`${driver}-plain`, query);
      expect(first.body).toEqual(receipt('payPlain', amount));
      expect(replay.body).toEqual({
        ...(first.body as object),
        extensions: { idempotency: { replayed: ['payPlain'] } },
      });
      expect(await rows(amount)).toBe(1);
    });

    it('a label given by a getter: the first answer is the receipt, as its replay is', async () => {
      const amount = driver === 'apollo' ? 103 : 203;
      const query = `mutation { pay(amount: ${amount}) { id amount label } }`;
      const first = await send(`${driver}-getter`, query);
      const replay = await send(`${driver}-getter`, query);
      expect(replay.body).toEqual({
        ...receipt('pay', amount),
        extensions: { idempotency: { replayed: ['pay'] } },
      });
      expect(await rows(amount)).toBe(1);
      // Fails: { data: null, errors: ["'ownKeys' on proxy: trap returned extra keys but proxy
      // target is non-extensible"] } for a receipt that committed.
      expect(first.body).toEqual(receipt('pay', amount));
    });
  },
);
