import { jest } from '@jest/globals';
import {
  type CallHandler,
  ClassSerializerInterceptor,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  type Provider,
} from '@nestjs/common';
import { APP_INTERCEPTOR, Reflector } from '@nestjs/core';
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
 * Adversary, round 68: a mutation whose value is a plain object with a getter of its OWN (an
 * object literal `{ id, amount, get label() { ... } }`, the ordinary way to compute a field in
 * a resolver that returns a row) answers every REPLAY with a non-null error (`Cannot return
 * null for non-nullable field Receipt.label`, `data.pay: null`) as soon as a layer outside
 * `@Idempotent()` copies the value's own keys: an interceptor that spreads it
 * (`map((v) => ({ ...v }))`, `Object.assign({}, v)`) or Nest's own global
 * `ClassSerializerInterceptor` (class-transformer's `instanceToPlain` copies `Object.keys()`
 * of a value with no class). The first answer, and the same app without the library, answer
 * the label: an own getter is an own enumerable key, which every such copy reads.
 *
 * What happens: storing reads `label` through its getter and marks it `ACCESSORS`
 * (lib/graphql/wire-value.ts `walkValue`, `readsThroughAccessor` says true of an own getter
 * as of a class's). A replay (`fromWire` -> `throughGetters`) moves every `ACCESSORS` field
 * onto a getter of a prototype of its own and DELETES the own key: "as on an instance of the
 * class, they are no own keys". That holds of a class's getter, not of an own one: the replay
 * has `Object.keys()` = ['id', 'amount'] where the first answer (the Proxy's `ownKeys`, the
 * value's) has ['id', 'amount', 'label']; a spread / Object.assign / instanceToPlain of the
 * replay drops `label`, GraphQL reads undefined on a non-null field, and the whole mutation
 * field answers null with an error, on every retry. `JSON.stringify` of a replay lacks it too.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): every answer to the key is
 * the first's, but the replay marker; "the app's own code sees what it would without the
 * library"; "Copy it with a spread, `JSON` or lodash's `cloneDeep`, which read it as the value".
 *
 * Controls (pass): the same app without `@Idempotent()` (label answered through the spread /
 * serializer); the first answer with the library; a replay with NO outer copy (the prototype
 * getter answers).
 *
 * Severity: high (every retry of a committed mutation answers `data: null` with an error, in
 * an app that spreads or class-serializes its answers; the client can never get its receipt).
 *
 * Fixed: only a getter of the value's class is replayed through a getter (`ACCESSORS`); an own
 * getter's field is the replay's own data, as a copy of own keys has it.
 */
let pool: Pool;

@ObjectType()
class Receipt {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amount!: number;

  @Field()
  label!: string;
}

async function insert(amount: number): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO receipts (amount) VALUES ($1) RETURNING id',
    [amount],
  );
  return rows[0].id;
}

/** The row, its label computed by a getter of its own (an object literal). */
function receiptOf(id: number, amount: number): Receipt {
  return {
    id,
    amount,
    get label(): string {
      return `#${this.id}: ${this.amount} EUR`;
    },
  };
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
    return receiptOf(await insert(amount), amount);
  }

  /** The same, without @Idempotent(): what the app answers without the library. */
  @Mutation(() => Receipt)
  async payUnkeyed(@Args('amount', { type: () => Int }) amount: number): Promise<Receipt> {
    return receiptOf(await insert(amount), amount);
  }
}

/** An app interceptor that copies the answer (a spread), as many response mappers do. */
@Injectable()
class SpreadAnswers implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next
      .handle()
      .pipe(
        map((value: unknown) =>
          typeof value === 'object' && value !== null ? { ...value } : value,
        ),
      );
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

const outers = {
  spread: { provide: APP_INTERCEPTOR, useClass: SpreadAnswers },
  serializer: {
    provide: APP_INTERCEPTOR,
    useFactory: (reflector: Reflector) => new ClassSerializerInterceptor(reflector),
    inject: [Reflector],
  },
  none: undefined,
} satisfies Record<string, Provider | undefined>;

describe.each(
  GRAPHQL_DRIVERS.flatMap((driver) =>
    (Object.keys(outers) as (keyof typeof outers)[]).map((outer) => [driver, outer] as const),
  ),
)(
  'adversary 68: a replay of an own getter, copied by an outer layer, on %s (%s)',
  (driver, outer) => {
    let fixture: PoolApp;
    const base = (driver === 'apollo' ? 1000 : 2000) + Object.keys(outers).indexOf(outer) * 100;

    beforeAll(async () => {
      const interceptor = outers[outer];
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [ReceiptsResolver, ...(interceptor ? [interceptor] : [])],
      })
      class ReceiptsModule {}
      fixture = await startPoolApp(`adv68_owngetter_${driver}_${outer}`, {
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
          label: expect.stringMatching(new RegExp(`^#\\d+: ${amount} EUR$`)),
        },
      },
    });

    it('control: without @Idempotent(), the label is answered', async () => {
      const amount = base + 1;
      const answer = await send(
        `${driver}-${outer}-unkeyed`,
        `mutation { payUnkeyed(amount: ${amount}) { id amount label } }`,
      );
      expect(answer.body).toEqual(receipt('payUnkeyed', amount));
    });

    it('the first answer and every replay answer the label', async () => {
      const amount = base + 2;
      const query = `mutation { pay(amount: ${amount}) { id amount label } }`;
      const first = await send(`${driver}-${outer}-keyed`, query);
      expect(first.body).toEqual(receipt('pay', amount));
      const replay = await send(`${driver}-${outer}-keyed`, query);
      expect(await rows(amount)).toBe(1);
      // Fails with an outer spread or ClassSerializerInterceptor: { data: { pay: null }, errors:
      // ["Cannot return null for non-nullable field Receipt.label."] } on every retry.
      expect(replay.body).toEqual({
        ...(first.body as object),
        extensions: { idempotency: { replayed: ['pay'] } },
      });
    });
  },
);
