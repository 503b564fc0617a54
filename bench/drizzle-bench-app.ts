/**
 * The one-insert work of bench-app.ts on Drizzle: the library and Drizzle on one pg.Pool (the
 * `pool` option, no TypeORM), the same INSERT behind a plain route and behind `@Idempotent()`,
 * so that the ratio between them is the library's cost for a Drizzle app. Its own process, as
 * bench-app.ts is.
 */
import 'reflect-metadata';
import { Body, Controller, Inject, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { drizzle, type NodePgDatabase } from 'drizzle-orm/node-postgres';
import { bigserial, integer, pgTable, text, timestamp } from 'drizzle-orm/pg-core';
import { Pool } from 'pg';
import { IdempotencyModule, Idempotent } from '../lib/index.js';

const benchOrders = pgTable('bench_orders', {
  id: bigserial('id', { mode: 'number' }).primaryKey(),
  amount: integer('amount'),
  customer: text('customer'),
  createdAt: timestamp('created_at', { withTimezone: true }).defaultNow(),
});

interface OrderBody {
  amount: number;
  customer: string;
}

const DRIZZLE = Symbol('DRIZZLE');
const pool = new Pool({ connectionString: process.env.DATABASE_URL, max: 20 });

@Controller()
class DrizzleBenchController {
  constructor(@Inject(DRIZZLE) private readonly db: NodePgDatabase) {}

  private async work(body: OrderBody) {
    const [order] = await this.db
      .insert(benchOrders)
      .values({ amount: body.amount, customer: body.customer })
      .returning({ id: benchOrders.id });
    return { id: order.id, amount: body.amount, customer: body.customer, status: 'created' };
  }

  @Post('plain-drizzle')
  plain(@Body() body: OrderBody) {
    return this.work(body);
  }

  @Post('idempotent-drizzle')
  @Idempotent()
  idempotent(@Body() body: OrderBody) {
    return this.work(body);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRoot({
      globalKeys: true,
      pool,
      replayCacheSize: Number(process.env.REPLAY_CACHE_SIZE ?? 10_000),
    }),
  ],
  controllers: [DrizzleBenchController],
  providers: [{ provide: DRIZZLE, useValue: drizzle({ client: pool }) }],
})
class DrizzleBenchModule {}

const adapter =
  process.env.HTTP_ADAPTER === 'fastify' ? new FastifyAdapter() : new ExpressAdapter();
const app = await NestFactory.create(DrizzleBenchModule, adapter, { rawBody: true, logger: false });
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
console.log(`listening on ${(app.getHttpServer().address() as { port: number }).port}`);
process.once(
  'SIGTERM',
  () =>
    void app
      .close()
      .then(() => pool.end())
      .then(() => process.exit(0)),
);
