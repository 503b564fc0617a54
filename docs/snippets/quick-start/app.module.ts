// src/app.module.ts
import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule } from 'nestjs-idempotency-pg';
import { CreateOrders1767225600000 } from './create-orders.migration.js';
import { Order } from './order.entity.js';
import { OrdersController } from './orders.controller.js';

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      entities: [Order],
      // The library's tables first, then the app's own.
      migrations: [...IDEMPOTENCY_MIGRATIONS, CreateOrders1767225600000],
      migrationsRun: true,
      connectTimeoutMS: 5000, // an unreachable database is then a prompt 503
    }),
    TypeOrmModule.forFeature([Order]),
    IdempotencyModule.forRoot({
      // Keys are scoped per tenant (or API credential): two clients' keys never collide.
      tenant: (request) => request.headers['x-tenant-id'] as string,
    }),
  ],
  controllers: [OrdersController],
})
export class AppModule {}
