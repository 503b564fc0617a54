import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { unwrapResolverError } from '@apollo/server/errors';
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
import { type GraphQLFormattedError } from 'graphql';
import { PrismaPg } from '@prisma/adapter-pg';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { PrismaClient } from '../../../docs/snippets/prisma/src/generated/prisma/client.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 40b: Apollo's `formatError` that maps Prisma's unique violation (P2002) by its
 * `meta` (the model that clashes, `meta.modelName`) answers the first call with the API's
 * error and every retry of the key with another: the replay keeps the error's `code`, not
 * its `meta`.
 *
 * App: Apollo (Express), Prisma 7 on the pool given to the library (docs/guides/prisma.md, its
 * own schema: `OrderEvent @@unique([orderId, kind])`). `recordOrderEvent(orderId, kind)` is
 * `@Idempotent()` and calls `prisma.orderEvent.create`; an event recorded before fails with
 * `PrismaClientKnownRequestError` P2002 (a final error: effects rolled back, stored,
 * replayed). The app's `formatError` maps it as Prisma apps do, by `code` and `meta`:
 * `code === 'P2002'` -> `{ message: 'A ${meta.modelName} with these values already exists',
 * extensions: { code: 'CONFLICT', model: meta.modelName } }`.
 * What happens: round 39's fix stores the thrown error's own PLAIN props only
 * (lib/graphql/field-answer.ts:171-181: strings, finite numbers, booleans): `code: 'P2002'`
 * and `clientVersion` are kept, `meta` (an object: `{ modelName, driverAdapterError }`) is
 * dropped; the replay (lib/graphql/thrown-error.ts:33-38) is an `Error` with `code` and no
 * `meta`. `formatError` maps it half: every retry of the key gets `A undefined with these
 * values already exists`, `extensions.model` missing: another answer than the first, for ever.
 * graphql.md says "the error's own plain properties (a driver's `code`, `constraint`) are
 * kept, so a `formatError` that maps `code === '23505'` maps the replay too"; Prisma's driver
 * error carries what the app maps in `meta` (prisma.md itself points at
 * `meta.driverAdapterError`), and nothing says a replay drops it.
 * Expected: the retry's answer is the first one (byte for byte, but for the replay marker), as
 * for pg's flat `DatabaseError` since round 39.
 * Control: the same mutation without `@Idempotent()`: its retry meets the same P2002, mapped
 * the same way.
 * Severity: medium (no effect doubled; every retry of the key gets another error body than the
 * first answer, for ever).
 */
let pool: Pool;
let prisma: PrismaClient;

@ObjectType()
class OrderEventView {
  @Field()
  kind!: string;
}

@Resolver(() => OrderEventView)
class OrderEventsResolver {
  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => OrderEventView, { nullable: true })
  @Idempotent()
  async recordOrderEvent(
    @Args('orderId', { type: () => Int }) orderId: number,
    @Args('kind') kind: string,
  ): Promise<OrderEventView> {
    await prisma.orderEvent.create({ data: { orderId: BigInt(orderId), kind } });
    return { kind };
  }

  /** The control: the same without the library. */
  @Mutation(() => OrderEventView, { nullable: true })
  async recordOrderEventPlain(
    @Args('orderId', { type: () => Int }) orderId: number,
    @Args('kind') kind: string,
  ): Promise<OrderEventView> {
    await prisma.orderEvent.create({ data: { orderId: BigInt(orderId), kind } });
    return { kind };
  }
}

/** The app's error mapping: Prisma's unique violation is the API's CONFLICT, naming the model. */
function formatError(formatted: GraphQLFormattedError, error: unknown): GraphQLFormattedError {
  const original = unwrapResolverError(error) as
    { code?: unknown; meta?: { modelName?: string } } | undefined;
  if (original?.code === 'P2002') {
    const model = original.meta?.modelName;
    return {
      message: `A ${model} with these values already exists`,
      path: formatted.path,
      extensions: { code: 'CONFLICT', model },
    };
  }
  return formatted;
}

describe('adversary 40b: formatError reading a Prisma P2002 meta, on a replay (Apollo)', () => {
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
      providers: [OrderEventsResolver],
    })
    class OrderEventsModule {}
    fixture = await startPoolApp('adv40b_prisma_meta', {
      module: OrderEventsModule,
      adapter: 'express',
      max: 4,
      usePool: (started) => {
        pool = started;
        prisma = new PrismaClient({ adapter: new PrismaPg(started) });
      },
      setup: async (owner) => {
        await owner.query(`CREATE TABLE orders (
          id bigserial PRIMARY KEY, sku text NOT NULL, quantity int NOT NULL,
          status text NOT NULL, tracking_number text)`);
        await owner.query(`CREATE TABLE order_events (
          id bigserial PRIMARY KEY, order_id bigint REFERENCES orders(id), kind text NOT NULL,
          UNIQUE (order_id, kind))`);
        await owner.query(
          `INSERT INTO orders (id, sku, quantity, status) VALUES (1, 'a', 1, 'placed'), (2, 'b', 1, 'placed')`,
        );
      },
    });
  }, 60_000);

  afterAll(async () => {
    await prisma?.$disconnect();
    await fixture?.close();
  });

  const send = async (field: string, key: string, orderId: number) => {
    const answer = await request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ query: `mutation { ${field}(orderId: ${orderId}, kind: "shipped") { kind } }` });
    const body = answer.body as { extensions?: unknown };
    delete body.extensions;
    return { status: answer.status, body: body as unknown };
  };

  async function refusedTwice(field: string, orderId: number) {
    await fixture.admin.query(`INSERT INTO order_events (order_id, kind) VALUES ($1, 'shipped')`, [
      orderId,
    ]);
    const first = await send(field, `${field}-dup`, orderId);
    const retried = await send(field, `${field}-dup`, orderId);
    return { first, retried };
  }

  const conflict = (field: string) => ({
    status: 200,
    body: {
      data: { [field]: null },
      errors: [
        {
          message: 'A OrderEvent with these values already exists',
          path: [field],
          extensions: { code: 'CONFLICT', model: 'OrderEvent' },
        },
      ],
    },
  });

  it('control: without the library, the retry meets the same violation, mapped the same', async () => {
    const { first, retried } = await refusedTwice('recordOrderEventPlain', 1);
    expect(first).toEqual(conflict('recordOrderEventPlain'));
    expect(retried).toEqual(first);
  });

  it('the retry of the key gets the first answer again', async () => {
    const { first, retried } = await refusedTwice('recordOrderEvent', 2);
    expect(first).toEqual(conflict('recordOrderEvent'));
    expect(retried).toEqual(first);
  });
});
