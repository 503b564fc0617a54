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
 * Adversary, round 66: an interceptor outside `@Idempotent()` that answers a copy of the
 * mutation's value, made as JavaScript copies a class instance (its prototype kept, its own
 * enumerable data copied: `Object.assign(Object.create(Object.getPrototypeOf(v)), v)`, which
 * is Apollo Server's own `cloneObject`, and what lodash's `cloneDeep` does for an object),
 * breaks the REPLAY of a mutation whose value has a field given by a getter (`@Field() get
 * label()`): the first answer, and the same app without the library, answer the label; the
 * replay answers `data: null` with "Cannot return null for non-nullable field Receipt.label".
 *
 * What happens: a replay is the stored form made "a plain object that names Receipt as its
 * constructor" (`fromWire`, lib/graphql/wire-value.ts), not an instance: its prototype is not
 * Receipt's, and the getter's stored value is own data made not enumerable (`FROM_CLASS`), so
 * that a serializer copying own enumerable data leaves it out as it leaves a getter out. A
 * copy that keeps the prototype gets the getter back from the real value's prototype; from the
 * replay it gets neither the getter (no prototype) nor the data (not enumerable): the field is
 * gone. A plain-data label (control) is copied from both.
 *
 * Expected (docs/guides/graphql.md): "The answers are the same bytes when the operation is,
 * but for the replay marker"; a replay answers the field the first answer answered.
 *
 * Controls (pass): the same receipt without `@Idempotent()`; a receipt whose label is plain
 * data with `@Idempotent()`, its first answer and its replay; the getter receipt's first
 * answer.
 *
 * Severity: high (every retry of a committed mutation answers `data: null` with an error, in an
 * app whose interceptor only hands out defensive copies; a client that retried after a lost
 * answer never gets its receipt).
 *
 * Fixed: a replay gives a field the first answer read through a getter through a getter of a
 * prototype of its own (`ACCESSORS`, `throughGetters` in lib/graphql/wire-value.ts): no own key,
 * as on an instance, and a copy keeping the prototype reads it.
 */
let pool: Pool;

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

/** A copy of an object as JavaScript copies a class instance: its prototype, its own data. */
function copyOf(value: object): object {
  return Object.assign(
    Object.create(Object.getPrototypeOf(value) as object | null) as object,
    value,
  );
}

/** The app's interceptor: every answer handed out as a defensive copy. */
@Injectable()
class DefensiveCopies implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next
      .handle()
      .pipe(
        map((value: unknown) =>
          typeof value === 'object' && value !== null ? copyOf(value) : value,
        ),
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
  'adversary 66: an outer interceptor that answers a copy of the value, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [ReceiptsResolver, { provide: APP_INTERCEPTOR, useClass: DefensiveCopies }],
      })
      class ReceiptsModule {}
      fixture = await startPoolApp(`adv66_copy_${driver}`, {
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

    it('control: without @Idempotent(), the copy has the label', async () => {
      const amount = driver === 'apollo' ? 101 : 201;
      const answer = await send(
        `${driver}-unkeyed`,
        `mutation { payUnkeyed(amount: ${amount}) { id amount label } }`,
      );
      expect(answer.body).toEqual(receipt('payUnkeyed', amount));
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

    it('a label given by a getter: the replay has the label, as the first answer has', async () => {
      const amount = driver === 'apollo' ? 103 : 203;
      const query = `mutation { pay(amount: ${amount}) { id amount label } }`;
      const first = await send(`${driver}-getter`, query);
      const replay = await send(`${driver}-getter`, query);
      expect(first.body).toEqual(receipt('pay', amount));
      expect(await rows(amount)).toBe(1);
      // Fails: { data: null, errors: ["Cannot return null for non-nullable field
      // Receipt.label."] } on every retry of the committed receipt.
      expect(replay.body).toEqual({
        ...(first.body as object),
        extensions: { idempotency: { replayed: ['pay'] } },
      });
    });
  },
);
