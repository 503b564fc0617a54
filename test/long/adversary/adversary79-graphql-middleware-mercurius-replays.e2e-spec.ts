import { jest } from '@jest/globals';
import { ForbiddenException, Module } from '@nestjs/common';
import {
  Args,
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * The fixes of adversary 79's middleware breaks (the -middleware-list-item-error,
 * -nonnull-null-parent, -http-exception, -alias-retry and -key-twice-one-operation files,
 * on Apollo) on Mercurius, with and without `jit`: a replay answers the first answer's
 * errors where it had them, a field under another alias its first output, and the key twice
 * in one operation its first call's outputs at once.
 */
let pool: Pool;

/** A secret tag hidden (a null on a non-null item); 'staff' tags for staff only. */
const guard: FieldMiddleware = async (_ctx, next) => {
  const tags = (await next()) as string[];
  if (tags.includes('staff')) throw new ForbiddenException('staff only');
  return tags.map((tag) => (tag === 'secret' ? null : tag.toUpperCase()));
};

/** A note with a secret is null, on a non-null field. */
const redact: FieldMiddleware = async (_ctx, next) => {
  const note = (await next()) as string;
  return note.includes('secret') ? null : note;
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => [String], { nullable: true, middleware: [guard] })
  tags?: string[];

  @Field({ middleware: [redact] })
  note!: string;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent({ keyFrom: { arg: 'key' } })
  async createOrder(
    @Args('key') _key: string,
    @Args('tag', { defaultValue: 'green' }) tag: string,
    @Args('note', { defaultValue: 'rent' }) note: string,
  ): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, tags: ['red', tag], note };
  }
}

function ordersModule(jit: number | undefined) {
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
      GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
        ...(jit === undefined ? {} : { jit }),
      }),
    ],
    providers: [OrdersResolver],
  })
  class OrdersModule {}
  return OrdersModule;
}

describe.each([undefined, 1])('adversary 79 on Mercurius (jit %s)', (jit) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp(`adv79_mw_mercurius_${jit ?? 'off'}`, {
      module: ordersModule(jit),
      max: 6,
      adapter: 'fastify',
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  /** The first call, then the same document again (twice: `jit: 1` compiles the second). */
  const replayed = async (query: string) => {
    const first = await post(query);
    for (let i = 0; i < 2; i++) {
      const again = await post(query);
      expect(again.body).toEqual({
        ...first.body,
        extensions: { idempotency: { replayed: ['createOrder'] } },
      });
    }
    return first.body as { data: unknown; errors?: { path: unknown; message: string }[] };
  };

  const k = (name: string) => `"adv79-merc-${jit ?? 'off'}-${name}"`;

  it('an error at a list item, replayed there', async () => {
    const first = await replayed(
      `mutation { createOrder(key: ${k('item')}, tag: "secret") { id tags } }`,
    );
    // Mercurius writes the item's index as a string.
    expect(first.errors?.map((error) => String(error.path))).toEqual(['createOrder,tags,1']);
  });

  it('a non-null field’s null, replayed nulling its parent', async () => {
    const first = await replayed(
      `mutation { createOrder(key: ${k('null')}, note: "a secret") { id note } }`,
    );
    expect(first.data).toEqual({ createOrder: null });
  });

  it('an HttpException, replayed as one', async () => {
    const first = await replayed(
      `mutation { createOrder(key: ${k('http')}, tag: "staff") { id tags } }`,
    );
    expect(first.errors?.[0]?.message).toBe('staff only');
  });

  it('a retry under another alias: the first output', async () => {
    const first = await post(`mutation { createOrder(key: ${k('alias')}) { id tags } }`);
    for (let i = 0; i < 2; i++) {
      const again = await post(`mutation { createOrder(key: ${k('alias')}) { id colours: tags } }`);
      expect(again.body).toEqual({
        data: { createOrder: { id: first.body.data.createOrder.id, colours: ['RED', 'GREEN'] } },
        extensions: { idempotency: { replayed: ['createOrder'] } },
      });
    }
  });

  it('the key twice in one operation: at once, the same', async () => {
    const query = `mutation { a: createOrder(key: ${k('twice')}) { id tags } b: createOrder(key: ${k('twice')}) { id tags } }`;
    const began = performance.now();
    const answer = await post(query);
    expect(performance.now() - began).toBeLessThan(1_500);
    expect(answer.body.errors).toBeUndefined();
    expect(answer.body.data.b).toEqual(answer.body.data.a);
  });
});
