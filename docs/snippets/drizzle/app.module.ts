// app.module.ts: one pg.Pool, shared by the library and Drizzle
import { Module, type OnApplicationShutdown } from '@nestjs/common';
import { drizzle } from 'drizzle-orm/node-postgres';
import { IdempotencyModule } from 'nestjs-idempotency-pg';
import { Pool } from 'pg';
import { DRIZZLE } from './database.js';
import { OrdersController } from './orders.controller.js';
import { OrdersService } from './orders.service.js';
import * as schema from './schema.js';

const pool = new Pool({ connectionString: process.env.DATABASE_URL });

@Module({
  imports: [
    // `pool`: the library runs on it, without TypeORM; every query on it inside an
    // @Idempotent() request joins the request's transaction.
    IdempotencyModule.forRoot({ globalKeys: true, pool }),
  ],
  controllers: [OrdersController],
  providers: [
    // Drizzle on THE SAME pool: that is what makes its statements the request's.
    { provide: DRIZZLE, useValue: drizzle({ client: pool, schema }) },
    OrdersService,
  ],
})
export class AppModule implements OnApplicationShutdown {
  async onApplicationShutdown(): Promise<void> {
    await pool.end();
  }
}
