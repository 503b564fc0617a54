// app.module.ts: no TypeORM; the module is given the pool Kysely runs on.
import { Module } from '@nestjs/common';
import { IdempotencyModule } from 'nestjs-idempotency-pg';
import { db, KYSELY, pool, PG_POOL } from './database.js';
import { OrdersController } from './orders.controller.js';
import { OrdersService } from './orders.service.js';

@Module({
  imports: [IdempotencyModule.forRoot({ globalKeys: true, pool })],
  controllers: [OrdersController],
  providers: [
    OrdersService,
    { provide: PG_POOL, useValue: pool },
    { provide: KYSELY, useValue: db },
  ],
})
export class AppModule {}
