import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
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
import { PrismaPg } from '@prisma/adapter-pg';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { PrismaClient } from '../../../docs/snippets/prisma/src/generated/prisma/client.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 62: the first answer of a mutation that returns a Prisma row with computed
 * fields (Prisma's own "Computed fields" recipe, a `result` client extension) answers those
 * fields null (a non-null one fails the whole mutation's data) as soon as another selected
 * field of the row is a Promise (a computed field that signs a link, as in Prisma's
 * discussions: `compute(order) { return signer.sign(...) }`, which GraphQL awaits). The
 * replay answers them right: the first answer and its replays differ.
 *
 * The app (Apollo on Express, Mercurius on Fastify; Prisma 7 on the pool, docs/guides/prisma.md
 * and its snippet schema):
 *
 *   const prisma = new PrismaClient({ adapter }).$extends({ result: { order: {
 *     label: { needs: { sku: true, quantity: true }, compute: (o) => `${o.quantity} x ${o.sku}` },
 *     receiptUrl: { needs: { id: true }, compute: (o) => sign(`receipts/${o.id}.pdf`) },  // a Promise
 *   } } });
 *   @Mutation(() => OrderModel) @Idempotent() placeOrder(...) { return prisma.order.create(...) }
 *   mutation { placeOrder(sku: "widget") { sku label receiptUrl } }
 *
 * What happens: a row with computed fields is a Proxy (Prisma's `createCompositeProxy`):
 * its `get` trap computes `label`; its `getOwnPropertyDescriptor` trap reports a computed
 * field as `{ enumerable, writable, configurable }` with no `value`. `outputWire` reads each
 * field through `get` (right: `label` is stored as "2 x widget") and awaits `receiptUrl`, a
 * Promise, so since 846930c the first answer is `over(source, replaced)` (lib/graphql/
 * wire-value.ts, `over`): `Object.defineProperties(copy, Object.getOwnPropertyDescriptors(row))`
 * turns each computed field into an own `undefined` (the descriptor has no value), and only
 * `receiptUrl` is laid over it. GraphQL reads `label` off the copy: undefined, so null, and
 * for `label: String!` "Cannot return null for non-nullable field", `data: null`, while the
 * order is committed and the stored answer (replayed to every retry) holds "2 x widget".
 *
 * Expected: "The first call gets the resolver's own value"; "The answers are the same bytes
 * when the operation is, but for the replay marker" (docs/guides/graphql.md, "What is stored,
 * and replayed"): the first answer has the label, and the replay is that answer with the
 * marker.
 *
 * Control: the same row and selection without `receiptUrl` (no Promise, no copy): the label is
 * answered, and the replay is the first answer with the marker. Passes on both drivers.
 *
 * Severity: medium-high (the client is told the mutation failed, `data: null`, while its work
 * committed; its retry, if it makes one, gets a different answer; an app without computed
 * Promises is untouched).
 *
 * Fixed: the Proxy reads every field it does not answer from the value itself (Prisma's
 * computed fields included).
 */
let pool: Pool;
let signed = 0;
const sign = (path: string): Promise<string> =>
  Promise.resolve(`https://files.example/${path}?sig=${(signed += 1)}`);

function extended(started: Pool) {
  return new PrismaClient({ adapter: new PrismaPg(started) }).$extends({
    result: {
      order: {
        label: {
          needs: { sku: true, quantity: true },
          compute: (order: { sku: string; quantity: number }) => `${order.quantity} x ${order.sku}`,
        },
        receiptUrl: {
          needs: { id: true },
          compute: (order: { id: bigint }) => sign(`receipts/${order.id}.pdf`),
        },
      },
    },
  });
}
let prisma: ReturnType<typeof extended>;

@ObjectType('Order')
class OrderModel {
  @Field()
  sku!: string;

  @Field(() => Int)
  quantity!: number;

  @Field(() => String)
  label!: string;

  @Field(() => String, { nullable: true })
  receiptUrl!: Promise<string>;
}

@Resolver()
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => OrderModel)
  @Idempotent()
  placeOrder(@Args('sku') sku: string) {
    return prisma.order.create({ data: { sku, quantity: 2, status: 'placed' } });
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
  'adversary 62: a Prisma row with computed fields, one a Promise, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [OrdersResolver],
      })
      class OrdersModule {}
      fixture = await startPoolApp(`adv62_prisma_computed_${driver}`, {
        module: OrdersModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => {
          pool = started;
          prisma = extended(started);
        },
        setup: async (admin) => {
          await admin.query(`CREATE TABLE orders (
            id bigserial PRIMARY KEY, sku text NOT NULL, quantity int NOT NULL,
            status text NOT NULL, tracking_number text)`);
        },
      });
    }, 60_000);

    afterAll(async () => {
      await prisma?.$disconnect();
      await fixture?.close();
    });

    const send = (key: string, query: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .timeout(10_000)
        .send({ query });
    const rows = async (sku: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM orders WHERE sku = $1', [sku])).rows[0]
          .count,
      );
    const replayedAs = (first: { body: object }) => ({
      ...first.body,
      extensions: { idempotency: { replayed: ['placeOrder'] } },
    });

    it('control: the computed label without the Promise: answered, replayed', async () => {
      const sku = `${driver}-ctl`;
      const query = `mutation { placeOrder(sku: "${sku}") { sku label } }`;
      const first = await send(sku, query);
      const replay = await send(sku, query);
      expect(first.body).toEqual({ data: { placeOrder: { sku, label: `2 x ${sku}` } } });
      expect(replay.body).toEqual(replayedAs(first));
      expect(await rows(sku)).toBe(1);
    }, 20_000);

    it('the computed label beside a computed Promise: answered, replayed', async () => {
      const sku = `${driver}-signed`;
      const query = `mutation { placeOrder(sku: "${sku}") { sku label receiptUrl } }`;
      const first = await send(sku, query);
      const replay = await send(sku, query);
      expect(first.body).toEqual({
        data: {
          placeOrder: { sku, label: `2 x ${sku}`, receiptUrl: expect.stringContaining('sig=') },
        },
      });
      expect(replay.body).toEqual(replayedAs(first));
      expect(await rows(sku)).toBe(1);
    }, 20_000);
  },
);
