// app.module.ts: one pg.Pool for the library and for Prisma; no TypeORM
import { Global, Module } from '@nestjs/common';
import { IdempotencyModule } from 'nestjs-idempotency-pg';
import { Pool } from 'pg';
import { OrdersController } from './orders.controller.js';
import { OrdersService } from './orders.service.js';
import { PG_POOL, PrismaService } from './prisma.service.js';
import { ShippingService } from './shipping.service.js';

@Global()
@Module({
  providers: [
    {
      provide: PG_POOL,
      useFactory: () => new Pool({ connectionString: process.env.DATABASE_URL }),
    },
    PrismaService,
  ],
  exports: [PG_POOL, PrismaService],
})
export class DatabaseModule {}

@Module({
  imports: [
    DatabaseModule,
    IdempotencyModule.forRootAsync({
      inject: [PG_POOL],
      useFactory: (pool: Pool) => ({ globalKeys: true, pool }),
    }),
  ],
  controllers: [OrdersController],
  providers: [OrdersService, ShippingService],
})
export class AppModule {}
