import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  type CallHandler,
  type ExecutionContext,
  type INestApplication,
  Injectable,
  Module,
  type NestInterceptor,
  RequestTimeoutException,
  UseInterceptors,
} from '@nestjs/common';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { catchError, type Observable, throwError, timeout, TimeoutError } from 'rxjs';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Adversary, round 19: GraphQL, a timeout interceptor inside `@Idempotent()` on a mutation:
 * the timeout's error is stored as the field's answer for ever (round 17's HTTP bug, fixed on
 * routes in 9c837b6, is still there on GraphQL's own path, lib/graphql/run-field.ts).
 *
 * What the app does (Apollo on Express, TypeORM): the timeout interceptor of Nest's own docs
 * (`timeout(400)`, `TimeoutError` mapped to `RequestTimeoutException`) on one mutation with
 * `@UseInterceptors(TimeoutInterceptor)` written above `@Idempotent()`, so it runs inside the
 * library's interceptor. The resolver writes an order, calls a slow payment provider (800 ms
 * this time), writes the payment. The client gets the timeout error, waits and retries with
 * the same key.
 *
 * What happens: run-field.ts has no inner-timeout rule (`isTimeoutError`, `handlerOutcome`):
 * the 408 reaches `failed()` as the resolver's own error (it has started), is classified
 * final, and is stored as the key's answer, rolled back, while the resolver still runs (its
 * second write is then refused). Every retry of the key, for ever, gets the 408 again; the
 * order is never placed with that key.
 *
 * What should happen: transactions.md's failure table: a timeout inside `@Idempotent()` (a
 * `timeout()` interceptor written above it) is "the timeout's answer as the app's filters
 * write it, not stored"; the handler's Promise goes on and "its effects commit with its own
 * answer when it settles"; "A timeout is never a stored answer." graphql.md says of the outer
 * timeout that it behaves "as on a route". The control (the same interceptor written under
 * `@Idempotent()`, outside it) does that on GraphQL: timeout first, then the resolver's value
 * replayed, the order placed once.
 *
 * Why it matters: a slow moment poisons a key for ever, the very thing the round-17 fix was
 * for; the order of two decorators decides it. Medium: per-resolver timeout interceptors are
 * common, and GraphQL mutations are a documented target of the library.
 */
let runs = 0;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

@Injectable()
class TimeoutInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      timeout(400),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

@ObjectType()
class Order {
  @Field()
  item!: string;
}

@Resolver(() => Order)
class OrdersResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async place(item: string): Promise<Order> {
    await this.dataSource.query('INSERT INTO orders (item, step) VALUES ($1, 1)', [item]);
    await sleep(800); // the payment provider, slow this time
    await this.dataSource.query('INSERT INTO orders (item, step) VALUES ($1, 2)', [item]);
    runs += 1;
    return { item };
  }

  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  placeInner(@Args('item') item: string): Promise<Order> {
    return this.place(item);
  }

  @Mutation(() => Order)
  @Idempotent()
  @UseInterceptors(TimeoutInterceptor)
  placeOuter(@Args('item') item: string): Promise<Order> {
    return this.place(item);
  }
}

describe('adversary 19: GraphQL, a timeout interceptor inside @Idempotent()', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv19_gql_inner_timeout');
    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: true,
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          graphiql: false,
        }),
      ],
      providers: [OrdersResolver, TimeoutInterceptor],
    })
    class OrdersModule {}
    app = await bootstrapTestApp(OrdersModule, 'express');
    await app.get(DataSource).query('CREATE TABLE orders (item text NOT NULL, step int NOT NULL)');
  }, 60_000);

  afterAll(async () => {
    await app?.close();
    await database?.drop();
  });

  const mutate = (field: string, item: string, key: string) =>
    request(app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ query: `mutation { ${field}(item: "${item}") { item } }` });

  const steps = async (item: string) =>
    (
      (await app
        .get(DataSource)
        .query('SELECT step FROM orders WHERE item = $1 ORDER BY step', [item])) as {
        step: number;
      }[]
    ).map((row) => row.step);

  const shape = (body: unknown, field: string) => {
    const { data, errors } = body as {
      data: Record<string, unknown> | null;
      errors?: { extensions?: { status?: number; code?: string } }[];
    };
    return {
      data: data?.[field] ?? null,
      error: errors?.[0]?.extensions?.status ?? errors?.[0]?.extensions?.code ?? null,
    };
  };

  it.each([
    ['placeOuter', 'written under @Idempotent() (outside it): control'],
    ['placeInner', 'written above @Idempotent() (inside it)'],
  ])(
    '%s, %s: the timeout is not stored; the retry replays the order, placed once',
    async (field) => {
      runs = 0;
      const first = await mutate(field, field, `order-${field}`);
      await sleep(1_200); // the resolver settles meanwhile
      const retry = await mutate(field, field, `order-${field}`);
      // Observed for placeInner: retry { data: null, error: 408 } (the timeout stored as the
      // answer), steps [] (rolled back, the second write refused), runs 0.
      expect({
        firstData: shape(first.body, field).data,
        retry: shape(retry.body, field),
        steps: await steps(field),
        runs,
      }).toEqual({
        firstData: null,
        retry: { data: { item: field }, error: null },
        steps: [1, 2],
        runs: 1,
      });
    },
    20_000,
  );
});
