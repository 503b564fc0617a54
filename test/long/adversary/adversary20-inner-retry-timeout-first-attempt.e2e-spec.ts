import {
  BadGatewayException,
  type CallHandler,
  Controller,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
  Param,
  Post,
  RequestTimeoutException,
  UseInterceptors,
} from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Args, Field, GraphQLModule, Mutation, ObjectType, Query, Resolver } from '@nestjs/graphql';
import { type Pool } from 'pg';
import { catchError, type Observable, retry, throwError, timeout, TimeoutError } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary, round 20: an interceptor inside `@Idempotent()` that retries the handler on a
 * failure and bounds it with a timeout (`retry(1)`, then `timeout()`): when the timeout fires
 * during the second attempt, the library waits for the *first* attempt's Promise
 * (`context.handlerReturned`, kept only for the first call: `own` in idempotent.decorator.ts:25-29),
 * which has already failed. The key is given back at once while the second attempt still runs;
 * the client's retry runs the handler again beside it: the card is charged twice.
 *
 * What the app does (Express, pool): a resilience interceptor of the app's, written above
 * `@Idempotent()` (inside it): `next.handle().pipe(retry({ count: 1, delay: 50 }),
 * timeout(600), ...)`, `TimeoutError` mapped to `RequestTimeoutException`. `POST /charges/:id`
 * calls the payment provider first, then writes the charge. The provider answers 502 at once
 * the first time (a blip: the handler throws `BadGatewayException`), then takes 1 s (it
 * charges). The client gets the 408, and retries with its key 100 ms later, as clients do.
 *
 * What happens: the 408 reaches run-owned.ts:266-277 with `handlerOutcome(context.handlerReturned)`:
 * the first attempt's rejected Promise (lib/http/handler-result.ts:180-190), which settles at
 * once; `settleDetached` rolls back and gives the key back (settle-detached.ts:38-41). The
 * client's retry (100 ms later) claims the key and calls the provider: a second charge, while the first
 * request's second attempt (its charge done) meets `TransactionEndedError` at its write.
 *
 * What should happen: transactions.md's failure table, a timeout inside `@Idempotent()`: "a
 * handler whose Promise goes on: as under an outer timeout, its effects commit with its own
 * answer when it settles ... 409 until the handler settles, then replays its answer". The
 * handler is going on (its second attempt), so the retry should get 409, then the charge's
 * answer; the provider charged once. The control (no blip: the first attempt is the slow one)
 * does exactly that.
 *
 * Why it matters: a double charge, the one thing the key is for, from a stock rxjs
 * retry-then-timeout interceptor. Severity: medium (needs a retrying interceptor inside
 * `@Idempotent()` and a timeout during its second attempt).
 *
 * GraphQL (added with the fix): the same interceptor above `@Idempotent()` on a mutation
 * (Apollo on Express, the same pool). run-field.ts waited for the same first attempt: its
 * 502 was stored as the field's final error for ever, while the second attempt charged and
 * had its write refused. graphql.md "Under an outer timeout": a resolver whose Promise goes on
 * commits with its own answer when it settles; retries get `key_in_progress` until then.
 */
let pool: Pool;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const calls: Record<string, number> = {};
const charges: Record<string, number> = {};

/** The payment provider: a 502 blip first when `blip`, then 1 s, and it charges. */
async function provider(id: string, blip: boolean): Promise<string> {
  calls[id] = (calls[id] ?? 0) + 1;
  if (blip && calls[id] === 1) throw new BadGatewayException('provider blip');
  await sleep(1_000);
  charges[id] = (charges[id] ?? 0) + 1;
  return `ch_${id}_${calls[id]}`;
}

@Injectable()
class ResilienceInterceptor implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next.handle().pipe(
      retry({ count: 1, delay: 50 }),
      timeout(600),
      catchError((error: unknown) =>
        throwError(() => (error instanceof TimeoutError ? new RequestTimeoutException() : error)),
      ),
    );
  }
}

@Controller()
class ChargesController {
  private async charge(id: string, blip: boolean) {
    const charge = await provider(id, blip);
    await pool.query('INSERT INTO charges (id, charge) VALUES ($1, $2)', [id, charge]);
    return { id, charge };
  }

  @Post('steady/:id')
  @UseInterceptors(ResilienceInterceptor)
  @Idempotent()
  steady(@Param('id') id: string) {
    return this.charge(id, false);
  }

  @Post('blip/:id')
  @UseInterceptors(ResilienceInterceptor)
  @Idempotent()
  blip(@Param('id') id: string) {
    return this.charge(id, true);
  }
}

@Module({
  imports: [IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) })],
  controllers: [ChargesController],
  providers: [ResilienceInterceptor],
})
class ChargesModule {}

describe('adversary 20: retry-then-timeout inside @Idempotent(): the first attempt is waited for', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv20_inner_retry_timeout', {
      module: ChargesModule,
      max: 6,
      usePool: (started) => {
        pool = started;
        pool.on('connect', (client) => client.on('error', () => undefined));
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE charges (id text NOT NULL, charge text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const send = (route: string, id: string) =>
    request(fixture.app.getHttpServer())
      .post(`/${route}/${id}`)
      .set('Idempotency-Key', `charge-${id}`)
      .timeout(10_000);

  it.each([
    ['steady', 'no blip, the first attempt is the slow one: control'],
    ['blip', 'a 502 blip, then the slow second attempt'],
  ])(
    '%s (%s): the retry waits for the going-on attempt; charged once',
    async (route) => {
      const id = route;
      const first = await send(route, id);
      await sleep(100);
      const early = await send(route, id);
      await sleep(2_000); // every attempt has settled
      const late = await send(route, id);
      const rows = await fixture.admin.query('SELECT charge FROM charges WHERE id = $1', [id]);
      // Observed for blip: early 408 (it claimed the key and ran the handler at once, beside
      // the first request's second attempt, and met the timeout itself), charges 2, one row
      // (the retry's; the first request's second attempt had its write refused).
      expect({
        first: first.status,
        early: early.status,
        late: late.status,
        lateReplayed: late.headers['idempotent-replayed'],
        charges: charges[id],
        rows: rows.rowCount,
      }).toEqual({
        first: 408,
        early: 409,
        late: 201,
        lateReplayed: 'true',
        charges: 1,
        rows: 1,
      });
    },
    20_000,
  );
});

@ObjectType()
class Charge {
  @Field()
  id!: string;

  @Field()
  charge!: string;
}

@Resolver(() => Charge)
class ChargesResolver {
  private async charge(id: string, blip: boolean) {
    const charge = await provider(id, blip);
    await pool.query('INSERT INTO charges (id, charge) VALUES ($1, $2)', [id, charge]);
    return { id, charge };
  }

  @Query(() => Number)
  ping(): number {
    return 1;
  }

  @Mutation(() => Charge)
  @UseInterceptors(ResilienceInterceptor)
  @Idempotent()
  steadyCharge(@Args('id') id: string) {
    return this.charge(id, false);
  }

  @Mutation(() => Charge)
  @UseInterceptors(ResilienceInterceptor)
  @Idempotent()
  blipCharge(@Args('id') id: string) {
    return this.charge(id, true);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [ChargesResolver, ResilienceInterceptor],
})
class ChargesGraphqlModule {}

describe('adversary 20: GraphQL, retry-then-timeout inside @Idempotent(): the first attempt is waited for', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv20_inner_retry_timeout_gql', {
      module: ChargesGraphqlModule,
      max: 6,
      usePool: (started) => {
        pool = started;
        pool.on('connect', (client) => client.on('error', () => undefined));
      },
      setup: async (admin) => {
        await admin.query('CREATE TABLE charges (id text NOT NULL, charge text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    await fixture?.close();
  });

  const mutate = (field: string, id: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', `charge-${id}`)
      .timeout(10_000)
      .send({ query: `mutation { ${field}(id: "${id}") { id charge } }` });

  /** The field's data, or its first error: the library's code, else its message. */
  const shape = (body: unknown, field: string) => {
    const { data, errors } = body as {
      data: Record<string, unknown> | null;
      errors?: { message?: string; extensions?: { code?: unknown } }[];
    };
    const error = errors?.[0];
    const code = error?.extensions?.code;
    return data?.[field] ?? (code === 'key_in_progress' ? code : error?.message);
  };

  it.each([
    ['steadyCharge', 'no blip, the first attempt is the slow one: control'],
    ['blipCharge', 'a 502 blip, then the slow second attempt'],
  ])(
    '%s (%s): the retry waits for the going-on attempt; charged once',
    async (field) => {
      const id = `gql-${field}`;
      const first = await mutate(field, id);
      await sleep(100);
      const early = await mutate(field, id);
      await sleep(2_000); // every attempt has settled
      const late = await mutate(field, id);
      const rows = await fixture.admin.query('SELECT charge FROM charges WHERE id = $1', [id]);
      // Observed for blipCharge before the fix: early and late 'provider blip' (the first
      // attempt's 502, stored), charges 1, no row (the second attempt's write refused).
      expect({
        first: shape(first.body, field),
        early: shape(early.body, field),
        late: shape(late.body, field),
        charges: charges[id],
        rows: rows.rowCount,
      }).toEqual({
        first: 'Request Timeout',
        early: 'key_in_progress',
        late: { id, charge: `ch_${id}_${calls[id]}` },
        charges: 1,
        rows: 1,
      });
    },
    20_000,
  );
});
