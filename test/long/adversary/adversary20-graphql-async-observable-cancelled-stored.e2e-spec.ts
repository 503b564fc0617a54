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
import {
  catchError,
  defer,
  map,
  type Observable,
  switchMap,
  throwError,
  timeout,
  TimeoutError,
  timer,
} from 'rxjs';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Adversary, round 20: GraphQL, an inner timeout over an async resolver that resolves to an
 * Observable (a write, then an `HttpService` call): the library's own "cancelled" marker is
 * stored as the field's final error, for ever.
 *
 * What the app does (Apollo on Express, TypeORM): Nest's documented timeout interceptor
 * (`timeout(400)`, `TimeoutError` mapped to `RequestTimeoutException`) written above
 * `@Idempotent()` on a mutation (inside the library). The resolver is `async`: it writes the
 * order, then returns the payment provider's call as an Observable (what `HttpService.post()`
 * returns; modelled by `timer()`), which Nest flattens. The provider is slow the first time
 * (800 ms), fast on the retry.
 *
 * What happens: the timeout unsubscribes from the provider's Observable (cancelled).
 * `handlerOutcome` (lib/http/handler-result.ts:188) maps the resolved Observable to
 * `{ error: CANCELLED }`, a plain Error. On HTTP, `settleDetached` rolls any error back and
 * gives the key back; on GraphQL, run-field.ts:146-148 hands it to `settle()`, which sends it
 * to `failed()` (run-field.ts:178): the resolver had started, `isTimeoutError(CANCELLED)` is
 * false, `classifyHandlerError` says `final`, and it is stored as the field's error
 * ("the Observable the handler resolved to was cancelled by a timeout", INTERNAL_SERVER_ERROR).
 * Every retry of the key replays that internal message for ever; the order is never placed
 * with that key.
 *
 * What should happen: graphql.md "Under an outer timeout": "A timeout inside `@Idempotent()`
 * ... is never stored either: ... one the timeout cancelled (an Observable) ... is rolled back
 * and its key given back." The retry should run the resolver again and place the order. The
 * control (the same work as a plain Observable resolver, not `async`) does exactly that.
 *
 * Why it matters: the same shape as round 19's HTTP fix (f924d56), missed on GraphQL: an
 * `async` resolver returning an `HttpService` call is idiomatic Nest. A key is poisoned for
 * ever with a library-internal message. Severity: medium (a lost operation per slow moment,
 * no double effect).
 */
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const providerCalls: Record<string, number> = {};

/** The payment provider, as `HttpService` returns it: slow the first time, fast after. */
const provider = (item: string): Observable<string> => {
  providerCalls[item] = (providerCalls[item] ?? 0) + 1;
  return timer(providerCalls[item] === 1 ? 800 : 10).pipe(map(() => `paid-${item}`));
};

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

  @Field()
  receipt!: string;
}

@Resolver(() => Order)
class OrdersResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Query(() => Number)
  ping(): number {
    return 1;
  }

  /** The trigger: `async`, its Promise resolves to the provider's Observable. */
  @Mutation(() => Order)
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  async placeAsync(@Args('item') item: string): Promise<Observable<Order>> {
    await this.dataSource.query('INSERT INTO orders (item) VALUES ($1)', [item]);
    return provider(item).pipe(map((receipt) => ({ item, receipt })));
  }

  /** Control: the same work as one Observable (not `async`). */
  @Mutation(() => Order)
  @UseInterceptors(TimeoutInterceptor)
  @Idempotent()
  placeObservable(@Args('item') item: string): Observable<Order> {
    return defer(() => this.dataSource.query('INSERT INTO orders (item) VALUES ($1)', [item])).pipe(
      switchMap(() => provider(item)),
      map((receipt) => ({ item, receipt })),
    );
  }
}

describe('adversary 20: GraphQL, inner timeout over an async resolver resolving to an Observable', () => {
  let database: TestDatabase;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv20_gql_async_obs');
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
    await app.get(DataSource).query('CREATE TABLE orders (item text NOT NULL)');
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
      .send({ query: `mutation { ${field}(item: "${item}") { item receipt } }` });

  const rows = async (item: string) =>
    (
      (await app.get(DataSource).query('SELECT item FROM orders WHERE item = $1', [item])) as {
        item: string;
      }[]
    ).length;

  const shape = (body: unknown, field: string) => {
    const { data, errors } = body as {
      data: Record<string, unknown> | null;
      errors?: { message?: string }[];
    };
    return { data: data?.[field] ?? null, error: errors?.[0]?.message ?? null };
  };

  it.each([
    ['placeObservable', 'a plain Observable resolver: control'],
    ['placeAsync', 'an async resolver resolving to an Observable'],
  ])(
    '%s, %s: cancelled by the timeout, given back; the retry places the order',
    async (field) => {
      const key = `order-${field}`;
      const first = await mutate(field, field, key);
      await sleep(1_200); // the provider's first call would have ended by now
      const retry = await mutate(field, field, key);
      // Observed for placeAsync: retry { data: null, error: 'the Observable the handler
      // resolved to was cancelled by a timeout' } (stored), rows 0, provider called once.
      expect({
        first: shape(first.body, field),
        retry: shape(retry.body, field),
        rows: await rows(field),
        providerCalls: providerCalls[field],
      }).toEqual({
        first: { data: null, error: 'Request Timeout' },
        retry: { data: { item: field, receipt: `paid-${field}` }, error: null },
        rows: 1,
        providerCalls: 2,
      });
    },
    20_000,
  );
});
