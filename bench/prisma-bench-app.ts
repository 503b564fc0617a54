/**
 * The one-insert work on Prisma 7 (the orders example's client on @prisma/adapter-pg), behind
 * a plain route and behind `@Idempotent()`, on one pg.Pool shared by Prisma and the library:
 * the ratio between the two is the library's cost for a Prisma app. Its own process, as
 * bench-app.ts is; the tables are made by the benchmark (the example's migrate()).
 */
import 'reflect-metadata';
import { Body, Controller, Module, Post } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ExpressAdapter } from '@nestjs/platform-express';
import { FastifyAdapter } from '@nestjs/platform-fastify';
import { type Pool } from 'pg';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { DatabaseModule } from '../examples/prisma-orders/database/database.module.js';
import { PG_POOL } from '../examples/prisma-orders/database/pg-pool.js';
import { PrismaService } from '../examples/prisma-orders/database/prisma.service.js';

interface OrderBody {
  sku: string;
  quantity: number;
}

@Controller()
class PrismaBenchController {
  constructor(private readonly prisma: PrismaService) {}

  private async work(body: OrderBody) {
    const order = await this.prisma.order.create({
      data: { sku: body.sku, quantity: body.quantity, status: 'placed' },
    });
    return { id: Number(order.id), sku: order.sku, quantity: order.quantity, status: 'placed' };
  }

  @Post('plain-prisma')
  plain(@Body() body: OrderBody) {
    return this.work(body);
  }

  @Post('idempotent-prisma')
  @Idempotent()
  idempotent(@Body() body: OrderBody) {
    return this.work(body);
  }
}

@Module({
  imports: [
    DatabaseModule.register(process.env.DATABASE_URL!),
    IdempotencyModule.forRootAsync({
      inject: [PG_POOL],
      useFactory: (pool: Pool) => ({ globalKeys: true, pool }),
    }),
  ],
  controllers: [PrismaBenchController],
})
class PrismaBenchModule {}

const adapter =
  process.env.HTTP_ADAPTER === 'fastify' ? new FastifyAdapter() : new ExpressAdapter();
const app = await NestFactory.create(PrismaBenchModule, adapter, { rawBody: true, logger: false });
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
console.log(`listening on ${(app.getHttpServer().address() as { port: number }).port}`);
process.once('SIGTERM', () => void app.close().then(() => process.exit(0)));
