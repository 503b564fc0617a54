import { jest } from '@jest/globals';
import {
  type CallHandler,
  type ExecutionContext,
  type INestApplication,
  Injectable,
  Logger,
  Module,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { timeout } from 'rxjs';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { GraphQLModule } from '@nestjs/graphql';
import { TypeOrmModule } from '@nestjs/typeorm';
import { bootstrapTestApp } from './support/bootstrap.js';
import {
  Args,
  createUnionType,
  Field,
  GraphQLISODateTime,
  ID,
  InputType,
  Int,
  Mutation,
  registerEnumType,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { getDataSourceToken, InjectDataSource } from '@nestjs/typeorm';
import { GraphQLError } from 'graphql';
import request from 'supertest';
import { type DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../lib/index.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { withoutMarker } from './support/graphql-replay.js';

jest.mock('@fastify/static', () => () => undefined);
const { createTransfersTable, GRAPHQL_DRIVERS, startGraphqlApp } =
  await import('./support/graphql-app.js');
// Mercurius' own error class (its documented way to answer with extensions and an HTTP status).
const { ErrorWithProps } = (await import('mercurius')).default as unknown as {
  ErrorWithProps: new (message: string, extensions: object, statusCode: number) => Error;
};

@ObjectType()
class Account {
  @Field(() => Int)
  id!: number;

  @Field()
  owner!: string;
}

/** A lazy relation, as TypeORM's `{ lazy: true }` gives one: the field's value is a Promise. */
@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Account)
  account!: Promise<Account>;
}

@ObjectType()
class Payment {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amount!: number;

  @Field(() => GraphQLISODateTime)
  paidAt!: Date;
}

@ObjectType()
class Refusal {
  @Field(() => Int)
  id!: number;

  @Field()
  reason!: string;
}

/** A union told apart by a field, as the guide says a union must be. */
const PaymentResult = createUnionType({
  name: 'PaymentResult',
  types: () => [Payment, Refusal] as const,
  resolveType: (value: { amount?: unknown }) => ('amount' in value ? Payment : Refusal),
});

/** A type whose field resolver reads a Date of its parent that is not a field. */
@ObjectType()
class Ticket {
  @Field(() => Int)
  id!: number;

  createdAt!: Date;
}

/** An order with a numeric id exposed as an ID, whose lines a field resolver finds by it. */
@ObjectType()
class Basket {
  @Field(() => ID)
  id!: number;
}

/**
 * A type whose class has a method that is not a field: a replay, a plain object, has not got
 * it. `code` is its own data that is not a field.
 */
@ObjectType()
class Voucher {
  @Field(() => Int)
  id!: number;

  code = 'V';

  describe(): string {
    return `voucher ${this.id}`;
  }
}

/** The lines of the baskets, by basket id (what a DataLoader or a repository holds). */
const LINES: { basketId: number; text: string }[] = [];

@Resolver(() => Basket)
class BasketResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Mutation(() => Basket)
  @Idempotent()
  async fillBasket(@Args('tag') tag: string): Promise<Basket> {
    const rows = (await this.dataSource.query(
      'INSERT INTO transfers (amount, note) VALUES (5, $1) RETURNING id',
      [tag],
    )) as { id: number }[];
    LINES.push({ basketId: rows[0].id, text: `line of ${tag}` });
    return { id: rows[0].id };
  }

  @ResolveField(() => [String])
  lines(@Parent() basket: Basket): string[] {
    return LINES.filter((line) => line.basketId === basket.id).map((line) => line.text);
  }
}

/** Reads what Prisma gives for a BigInt column that the type does not expose. */
@Resolver(() => Account)
class AccountFieldsResolver {
  @ResolveField(() => String)
  nextSeq(@Parent() account: Account & { ledgerSeq?: unknown }): string {
    const seq = account.ledgerSeq;
    return typeof seq === 'bigint' ? String(seq + 1n) : `not a bigint: ${typeof seq}`;
  }
}

enum Speed {
  Slow = 'slow',
  Fast = 'fast',
}
registerEnumType(Speed, { name: 'Speed' });

@InputType()
class ShipInput {
  @Field(() => GraphQLISODateTime)
  at!: Date;

  @Field(() => Speed, { defaultValue: Speed.Slow })
  speed!: Speed;

  @Field(() => String, { nullable: true })
  note?: string | null;

  @Field(() => [ID])
  items!: string[];
}

const runs = new Map<string, number>();

@Resolver(() => Ticket)
class AdversaryResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async insert(name: string, amount: number): Promise<number> {
    runs.set(name, (runs.get(name) ?? 0) + 1);
    const rows = (await this.dataSource.query(
      'INSERT INTO transfers (amount, note) VALUES ($1, $2) RETURNING id',
      [amount, name],
    )) as { id: number }[];
    return rows[0].id;
  }

  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async placeOrder(
    @Args('tag') tag: string,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<Order> {
    const id = await this.insert(tag, amount);
    const order = new Order();
    order.id = id;
    order.account = Promise.resolve({ id: 7, owner: 'ann' });
    return order;
  }

  @Mutation(() => PaymentResult)
  @Idempotent()
  async pay(
    @Args('tag') tag: string,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<typeof PaymentResult> {
    const id = await this.insert(tag, amount);
    return { id, amount, paidAt: new Date('2026-03-01T09:30:00.000Z') };
  }

  @Mutation(() => Ticket)
  @Idempotent()
  async openTicket(
    @Args('tag') tag: string,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<Ticket> {
    const id = await this.insert(tag, amount);
    return { id, createdAt: new Date('2026-03-01T00:00:00.000Z') };
  }

  /** A DateTime argument: a date the client mistyped reaches the resolver as an Invalid Date. */
  @Mutation(() => Int)
  @Idempotent()
  async schedule(@Args('tag') tag: string, @Args('at') at: Date): Promise<number> {
    return this.insert(tag, Number.isNaN(at.getTime()) ? -1 : 1);
  }

  /** What Prisma returns for a model with a BigInt column the GraphQL type does not expose. */
  @Mutation(() => Account)
  @Idempotent()
  async openAccount(@Args('tag') tag: string): Promise<Account> {
    const id = await this.insert(tag, 8);
    return { id, owner: 'ann', ledgerSeq: 9007199254740993n } as Account;
  }

  @Mutation(() => Voucher)
  @Idempotent()
  async issueVoucher(@Args('tag') tag: string): Promise<Voucher> {
    const voucher = new Voucher();
    voucher.id = await this.insert(tag, 10);
    return voucher;
  }

  @Mutation(() => Int)
  @Idempotent()
  async ship(@Args('tag') tag: string, @Args('input') _input: ShipInput): Promise<number> {
    return this.insert(tag, 9);
  }

  @ResolveField(() => Int)
  createdDay(@Parent() ticket: Ticket): number {
    return ticket.createdAt.getUTCDate();
  }

  @Mutation(() => Account)
  @Idempotent()
  async charge(
    @Args('tag') tag: string,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<Account> {
    await this.insert(tag, amount);
    throw new ErrorWithProps('Payment required', { code: 'PAYMENT_REQUIRED' }, 402);
  }

  /** Apollo Server's documented way to answer an error with an HTTP status and headers. */
  @Mutation(() => Account)
  @Idempotent()
  async throttle(
    @Args('tag') tag: string,
    @Args('amount', { type: () => Int }) amount: number,
  ): Promise<Account> {
    await this.insert(tag, amount);
    throw new GraphQLError('Slow down', {
      extensions: {
        code: 'RATE_LIMITED',
        http: { status: 429, headers: new Map([['retry-after', '7']]) },
      },
    });
  }
}

describe.each(GRAPHQL_DRIVERS)(
  'an idempotent mutation replays its first answer, whatever the resolver returned or threw, on %s',
  (driver) => {
    let database: TestDatabase;
    let app: INestApplication;

    beforeAll(async () => {
      LINES.length = 0;
      database = await createTestDatabase(`side_roads_${driver}`);
      app = await startGraphqlApp(database.url, driver, [
        AdversaryResolver,
        BasketResolver,
        AccountFieldsResolver,
      ]);
      await createTransfersTable(app);
    });
    afterAll(async () => {
      await app?.close();
      await database?.drop();
    });

    const send = async (query: string, key: string) => {
      const res = await request(app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .send({ query });
      return { status: res.status, text: res.text, retryAfter: res.headers['retry-after'] };
    };
    const rows = async (tag: string) =>
      (
        (await app
          .get<DataSource>(getDataSourceToken())
          .query('SELECT count(*)::int AS n FROM transfers WHERE note = $1', [tag])) as {
          n: number;
        }[]
      )[0].n;

    it('replays a lazy relation (a field whose value is a Promise) as first answered', async () => {
      const tag = `${driver}-lazy`;
      const query = `mutation { placeOrder(tag: "${tag}", amount: 1) { id account { id owner } } }`;
      const first = await send(query, tag);
      expect(first.text).toContain('"account":{"id":7,"owner":"ann"}');
      const again = await send(query, tag);
      expect(withoutMarker(again.text)).toBe(first.text);
      expect(await rows(tag)).toBe(1);
    });

    it('replays a union member (resolveType by a field) with its DateTime as first answered', async () => {
      const tag = `${driver}-union`;
      const query =
        `mutation { pay(tag: "${tag}", amount: 2) { ... on Payment { id amount paidAt } ` +
        '... on Refusal { id reason } } }';
      const first = await send(query, tag);
      expect(first.text).toContain('"paidAt":"2026-03-01T09:30:00.000Z"');
      const again = await send(query, tag);
      expect(withoutMarker(again.text)).toBe(first.text);
      expect(await rows(tag)).toBe(1);
    });

    it('replays a @ResolveField() that reads a Date of its parent as first answered', async () => {
      const tag = `${driver}-resolvefield`;
      const query = `mutation { openTicket(tag: "${tag}", amount: 3) { id createdDay } }`;
      const first = await send(query, tag);
      expect(first.text).toContain('"createdDay":1');
      const again = await send(query, tag);
      expect(withoutMarker(again.text)).toBe(first.text);
      expect(await rows(tag)).toBe(1);
    });

    it("replays a @ResolveField() that finds rows by its parent's ID as first answered", async () => {
      const tag = `${driver}-id`;
      const query = `mutation { fillBasket(tag: "${tag}") { id lines } }`;
      const first = await send(query, tag);
      expect(first.text).toContain(`"lines":["line of ${tag}"]`);
      const again = await send(query, tag);
      expect(withoutMarker(again.text)).toBe(first.text);
      expect(await rows(tag)).toBe(1);
    });

    it('refuses a mistyped DateTime argument, naming the argument and its scalar, not uploads', async () => {
      const tag = `${driver}-baddate`;
      const query = `mutation { schedule(tag: "${tag}", at: "2026-02-30 soon") }`;
      const res = await send(query, tag);
      const body = JSON.parse(res.text) as {
        errors: { message: string; extensions: { code: string; status: number } }[];
      };
      expect(body.errors[0].extensions).toEqual({ code: 'request_invalid', status: 400 });
      expect(body.errors[0].message).toContain(
        'the argument at is not a valid value of its type DateTime',
      );
      expect(body.errors[0].message).not.toMatch(/upload|a file/i);
      expect(await rows(tag)).toBe(0);
    });

    it('answers, commits and replays a row whose unexposed column is a BigInt (a Prisma model)', async () => {
      const tag = `${driver}-bigint`;
      const query = `mutation { openAccount(tag: "${tag}") { id owner nextSeq } }`;
      const first = await send(query, tag);
      expect(first.text).toContain('"owner":"ann","nextSeq":"9007199254740994"');
      const again = await send(query, tag);
      expect(withoutMarker(again.text)).toBe(first.text);
      expect(await rows(tag)).toBe(1);
    });

    it('replays a key stored before the typed form (no format: its data as JSON) as first answered', async () => {
      const tag = `${driver}-oldformat`;
      const query =
        `mutation { pay(tag: "${tag}", amount: 2) { ... on Payment { id amount paidAt } ` +
        '... on Refusal { id reason } } }';
      const first = await send(query, tag);
      const id = Number(/"id":(\d+)/.exec(first.text)![1]);
      // The same finished key under another name, which this process has not replayed from
      // memory, its answer in the bytes the library wrote before `format` 2.
      const old = {
        data: { id, amount: 2, paidAt: '2026-03-01T09:30:00.000Z', __typename: 'Payment' },
      };
      await app.get<DataSource>(getDataSourceToken()).query(
        `INSERT INTO idempotency_keys (tenant_id, key, fingerprint, state, recovery_point,
           response_code, response_body, response_headers, finished_at)
         SELECT tenant_id, $2, fingerprint, state, recovery_point, response_code, $3,
           response_headers, finished_at
         FROM idempotency_keys WHERE key = $1`,
        [`${tag}:pay`, `${tag}-old:pay`, Buffer.from(JSON.stringify(old))],
      );
      const again = await send(query, `${tag}-old`);
      expect(again.text).toContain('"replayed":["pay"]');
      expect(withoutMarker(again.text)).toBe(first.text);
      expect(await rows(tag)).toBe(1);
    });

    it('stores a class instance with a method that is not a field, and says once what a replay has not', async () => {
      const warn = jest.spyOn(Logger.prototype, 'warn');
      try {
        const answers = [];
        for (const tag of [`${driver}-voucher-1`, `${driver}-voucher-2`]) {
          const query = `mutation { issueVoucher(tag: "${tag}") { id } }`;
          const first = await send(query, tag);
          expect(first.text).toMatch(/"issueVoucher":\{"id":\d+\}/);
          answers.push([first, await send(query, tag)]);
          expect(await rows(tag)).toBe(1);
        }
        for (const [first, again] of answers) expect(withoutMarker(again.text)).toBe(first.text);
        const said = warn.mock.calls.filter(([message]) => String(message).includes('Voucher'));
        expect(said).toEqual([
          [
            "an idempotent mutation's value of type Voucher cannot be replayed as it was: a " +
              'replay has it as a plain object, not as an instance of Voucher, without describe ' +
              "of its class. The first answer has the resolver's own value; a replay gives the " +
              'resolvers under the mutation (a @ResolveField() reading its parent) the stored ' +
              'form. Keep what they read to plain data, Dates, BigInts, Maps and Sets, or ' +
              'compute it in a @ResolveField()',
          ],
        ]);
      } finally {
        warn.mockRestore();
      }
    });

    it('takes inline arguments and variables of the same values as one call (held)', async () => {
      const tag = `${driver}-inline`;
      const inline = `mutation { ship(tag: "${tag}", input: { items: [1, "2"], at: "2026-03-01T09:30:00Z", note: null }) }`;
      const first = await send(inline, tag);
      expect(first.text).not.toContain('errors');
      const res = await request(app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', tag)
        .send({
          query: 'mutation($t: String!, $i: ShipInput!) { ship(tag: $t, input: $i) }',
          variables: {
            t: tag,
            i: { at: '2026-03-01T09:30:00.000Z', speed: 'Slow', items: ['1', 2], note: null },
          },
        });
      expect(withoutMarker(res.text)).toBe(first.text);
      expect(await rows(tag)).toBe(1);
    });

    if (driver === 'apollo') {
      it('replays a GraphQLError with extensions.http headers (a Retry-After) as first answered', async () => {
        const tag = `${driver}-http`;
        const query = `mutation { throttle(tag: "${tag}", amount: 6) { id } }`;
        const first = await send(query, tag);
        expect(first.retryAfter).toBe('7');
        const again = await send(query, tag);
        expect({ ...again, text: withoutMarker(again.text) }).toEqual(first);
        expect(await rows(tag)).toBe(0);
      });
    }

    if (driver === 'mercurius') {
      it("replays Mercurius' ErrorWithProps with its HTTP status", async () => {
        const tag = `${driver}-errorwithprops`;
        const query = `mutation { charge(tag: "${tag}", amount: 4) { id } }`;
        const first = await send(query, tag);
        expect(first.status).toBe(402);
        const again = await send(query, tag);
        expect({ ...again, text: withoutMarker(again.text) }).toEqual(first);
        expect(await rows(tag)).toBe(0);
      });
    }
  },
);

describe('a tenant id read from the operation is refused with the rule it breaks (Apollo)', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('side_roads_tenant');
    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: true,
          logging: false,
        }),
        // The tenant as the client's token would carry it: here, a variable of the operation.
        IdempotencyModule.forRoot({
          tenant: (req) =>
            (req as unknown as { body?: { variables?: { tenant?: string } } }).body?.variables
              ?.tenant as string,
        }),
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          graphiql: false,
        }),
      ],
      providers: [AdversaryResolver, BasketResolver],
    })
    class TenantModule {}
    app = await bootstrapTestApp(TenantModule, 'express');
    await createTransfersTable(app);
  });
  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  it.each([
    ['a lone surrogate', 'acme\ud800', 'no valid tenant id: it holds a lone surrogate'],
    ['only white space', '   ', 'no valid tenant id: it is only white space'],
  ])('refuses a tenant id with %s, naming the rule it breaks', async (_what, tenant, why) => {
    const res = await request(app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', `tenant-${tenant.length}`)
      .send({
        query: 'mutation($tenant: String!) { fillBasket(tag: $tenant) { id } }',
        variables: { tenant },
      });
    const body = JSON.parse(res.text) as {
      errors: { message: string; extensions: { code: string } }[];
    };
    expect(body.errors[0].extensions.code).toBe('tenant_invalid');
    expect(body.errors[0].message).toContain(why);
  });
});

/** The usual global Nest timeout interceptor, outside @Idempotent(). */
@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler) {
    return next.handle().pipe(timeout(150));
  }
}

describe.each(GRAPHQL_DRIVERS)(
  'an outer timeout while the answer is stored does not lose it, on %s',
  (driver) => {
    let database: TestDatabase;
    let app: INestApplication;

    beforeAll(async () => {
      database = await createTestDatabase(`side_roads_outer_${driver}`);
      app = await startGraphqlApp(
        database.url,
        driver,
        [AdversaryResolver, BasketResolver],
        [{ provide: APP_INTERCEPTOR, useClass: TimeoutInterceptor }],
      );
      await createTransfersTable(app);
      // The store's own UPDATE of the key (its answer, its heartbeat) takes 400 ms.
      await app.get<DataSource>(getDataSourceToken()).query(`
      CREATE FUNCTION slow_store() RETURNS trigger LANGUAGE plpgsql AS
        $$ BEGIN PERFORM pg_sleep(0.4); RETURN NEW; END $$;
      CREATE TRIGGER slow_store BEFORE UPDATE ON idempotency_keys FOR EACH ROW
        WHEN (NEW.key LIKE 'slowstore%') EXECUTE FUNCTION slow_store();`);
    });
    afterAll(async () => {
      await app?.close();
      await database?.drop();
    });

    it("commits the resolver's answer once and replays it (held)", async () => {
      const key = `slowstore-${driver}`;
      const query = `mutation { fillBasket(tag: "${key}") { id } }`;
      const post = () =>
        request(app.getHttpServer()).post('/graphql').set('Idempotency-Key', key).send({ query });
      const first = await post();
      expect(first.text).toMatch(/timeout|Timeout/);
      await new Promise((resolve) => setTimeout(resolve, 1500));
      // The replay passes the same 150 ms timeout: on a loaded machine it may meet it (nothing
      // is stored by a replay's timeout), so it is asked again until it answers.
      let again = await post();
      for (let tries = 0; /Timeout has occurred/.test(again.text) && tries < 20; tries += 1) {
        await new Promise((resolve) => setTimeout(resolve, 300));
        again = await post();
      }
      expect(again.text).toMatch(/"fillBasket":\{"id":"\d+"\}/);
      expect(again.text).toContain('"replayed":["fillBasket"]');
      const [{ n }] = (await app
        .get<DataSource>(getDataSourceToken())
        .query('SELECT count(*)::int AS n FROM transfers WHERE note = $1', [key])) as {
        n: number;
      }[];
      expect(n).toBe(1);
    });
  },
);
