import { type DynamicModule, Global, Module, ValidationPipe } from '@nestjs/common';
import { APP_PIPE } from '@nestjs/core';
import { type Pool } from 'pg';
import { IdempotencyModule } from '../../lib/index.js';
import { createDatabase, DRIZZLE, PG_POOL } from './database.js';
import { OrdersController } from './orders.controller.js';
import { OrdersService } from './orders.service.js';
import { WAREHOUSE_URL } from './warehouse.client.js';

export interface OrdersAppSettings {
  /** The app's one pool: the library's transactions and Drizzle's queries share it. */
  pool: Pool;
  warehouseUrl: string;
  /** The library's lease and heartbeat; its defaults when not given. */
  leaseMs?: number;
  heartbeat?: boolean;
}

/** The pool and the Drizzle instance built on it, for every module (nestjs-cls's plugin too). */
@Global()
@Module({})
export class DatabaseModule {
  static forPool(pool: Pool): DynamicModule {
    return {
      module: DatabaseModule,
      providers: [
        { provide: PG_POOL, useValue: pool },
        { provide: DRIZZLE, useValue: createDatabase(pool) },
      ],
      exports: [PG_POOL, DRIZZLE],
    };
  }
}

/** The orders service: Drizzle on node-postgres, no TypeORM. */
@Module({})
export class OrdersAppModule {
  static register(settings: OrdersAppSettings): DynamicModule {
    return {
      module: OrdersAppModule,
      imports: [
        DatabaseModule.forPool(settings.pool),
        // `pool`: the library works on this pool instead of a TypeORM DataSource, and every
        // query on it inside an @Idempotent() request joins the request's transaction.
        IdempotencyModule.forRoot({
          globalKeys: true,
          pool: settings.pool,
          ...(settings.leaseMs === undefined ? {} : { leaseMs: settings.leaseMs }),
          ...(settings.heartbeat === undefined ? {} : { heartbeat: settings.heartbeat }),
        }),
      ],
      controllers: [OrdersController],
      providers: [
        OrdersService,
        { provide: WAREHOUSE_URL, useValue: settings.warehouseUrl },
        {
          provide: APP_PIPE,
          useValue: new ValidationPipe({ whitelist: true, forbidNonWhitelisted: true }),
        },
      ],
      exports: [OrdersService],
    };
  }
}
