import {
  type DynamicModule,
  Inject,
  Module,
  type OnApplicationShutdown,
  type Provider,
  ValidationPipe,
} from '@nestjs/common';
import { APP_INTERCEPTOR, APP_PIPE } from '@nestjs/core';
import { type Kysely } from 'kysely';
import { IdempotencyModule } from '../../lib/index.js';
import { RequestTimeoutInterceptor } from '../../sample-app/request-timeout.interceptor.js';
import { createDatabase, KYSELY, type OrdersDatabase, PG_POOL } from './database.js';
import { OrdersController, TEST_HOOKS } from './orders.controller.js';
import { OrdersService } from './orders.service.js';
import { WAREHOUSE, WarehouseClient } from './warehouse.client.js';

export interface OrdersSettings {
  databaseUrl: string;
  warehouseUrl: string;
  /** The lease a claim holds; the library's default (5 s) when not given. */
  leaseMs?: number;
  /** Whether a live instance renews its lease; the library's default (on) when not given. */
  heartbeat?: boolean;
  /** A global 408 after this long on every route (never stored); off when not given. */
  requestTimeoutMs?: number;
  /** Honour the `X-Test-Hold` header (tests only). */
  testHooks?: boolean;
}

/** Ends the pool once the app has stopped (Kysely's `destroy()` ends the pool it runs on). */
class DatabaseShutdown implements OnApplicationShutdown {
  constructor(@Inject(KYSELY) private readonly db: Kysely<OrdersDatabase>) {}

  async onApplicationShutdown() {
    await this.db.destroy();
  }
}

/**
 * The orders service: Kysely on one `pg.Pool`, and the idempotency module on the same pool.
 * No TypeORM: the library's tables come from its plain SQL schema (see schema.ts).
 */
@Module({})
export class AppModule {
  static register(settings: OrdersSettings): DynamicModule {
    const { pool, db } = createDatabase(settings.databaseUrl);
    return {
      module: AppModule,
      imports: [
        IdempotencyModule.forRoot({
          globalKeys: true,
          pool,
          ...(settings.leaseMs === undefined ? {} : { leaseMs: settings.leaseMs }),
          ...(settings.heartbeat === undefined ? {} : { heartbeat: settings.heartbeat }),
        }),
      ],
      controllers: [OrdersController],
      providers: [
        OrdersService,
        DatabaseShutdown,
        { provide: PG_POOL, useValue: pool },
        { provide: KYSELY, useValue: db },
        { provide: WAREHOUSE, useValue: new WarehouseClient(settings.warehouseUrl) },
        { provide: TEST_HOOKS, useValue: settings.testHooks ?? false },
        {
          provide: APP_PIPE,
          useValue: new ValidationPipe({ whitelist: true, forbidNonWhitelisted: true }),
        },
        ...requestTimeout(settings.requestTimeoutMs),
      ],
      exports: [PG_POOL, KYSELY, OrdersService],
    };
  }
}

/**
 * A global interceptor, so that it wraps `@Idempotent()`'s, as an app-wide timeout does (the
 * sample app's, as the Prisma example uses it). Its 408 is not the handler's answer: the
 * handler goes on in its transaction, and its own answer is the one stored.
 */
function requestTimeout(timeoutMs: number | undefined): Provider[] {
  if (!timeoutMs) return [];
  return [{ provide: APP_INTERCEPTOR, useValue: new RequestTimeoutInterceptor(timeoutMs) }];
}
