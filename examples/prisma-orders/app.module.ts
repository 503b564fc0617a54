import { type DynamicModule, Module, type Type, ValidationPipe } from '@nestjs/common';
import { APP_INTERCEPTOR, APP_PIPE } from '@nestjs/core';
import { type Pool } from 'pg';
import { IdempotencyModule } from '../../lib/index.js';
import { RequestTimeoutInterceptor } from '../../sample-app/request-timeout.interceptor.js';
import { DatabaseModule } from './database/database.module.js';
import { PG_POOL } from './database/pg-pool.js';
import { OrdersController } from './orders/orders.controller.js';
import { OrdersService } from './orders/orders.service.js';
import { TEST_HOOKS } from './orders/test-hooks.js';
import { WAREHOUSE, WarehouseClient } from './warehouse/warehouse.client.js';

export interface OrdersSettings {
  databaseUrl: string;
  warehouseUrl: string;
  /** The lease of a claim; the library's default when not given. */
  leaseMs?: number;
  /** Whether a live instance renews its lease; the library's default (on) when not given. */
  heartbeat?: boolean;
  /** A global timeout (408) on every route, outside `@Idempotent()`; 0 or unset: none. */
  requestTimeoutMs?: number;
  /** The test-only slow and faulty points of test-hooks.ts. */
  testHooks?: boolean;
  /**
   * The e2e suite's control only: Prisma on a pg.Pool of its own rather than the library's.
   * Its writes then commit apart from the stored answer, which is what the suite shows.
   */
  prismaOnOwnPool?: boolean;
  /** Controllers a test adds (its probes of Prisma's transactions). */
  controllers?: Type[];
}

/**
 * The orders service on Prisma 7: no TypeORM. The library is handed the app's pg.Pool, and the
 * Prisma client is built on that same pool (database/prisma.service.ts).
 */
@Module({})
export class OrdersAppModule {
  static register(settings: OrdersSettings): DynamicModule {
    return {
      module: OrdersAppModule,
      imports: [
        DatabaseModule.register(settings.databaseUrl, settings.prismaOnOwnPool),
        IdempotencyModule.forRootAsync({
          inject: [PG_POOL],
          useFactory: (pool: Pool) => ({
            globalKeys: true,
            pool,
            ...(settings.leaseMs === undefined ? {} : { leaseMs: settings.leaseMs }),
            ...(settings.heartbeat === undefined ? {} : { heartbeat: settings.heartbeat }),
          }),
        }),
      ],
      controllers: [OrdersController, ...(settings.controllers ?? [])],
      providers: [
        OrdersService,
        { provide: WAREHOUSE, useValue: new WarehouseClient(settings.warehouseUrl) },
        { provide: TEST_HOOKS, useValue: settings.testHooks ?? false },
        {
          provide: APP_PIPE,
          useValue: new ValidationPipe({ whitelist: true, forbidNonWhitelisted: true }),
        },
        ...(settings.requestTimeoutMs
          ? [
              {
                provide: APP_INTERCEPTOR,
                useValue: new RequestTimeoutInterceptor(settings.requestTimeoutMs),
              },
            ]
          : []),
      ],
    };
  }
}
