import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { Pool } from 'pg';
import { PrismaClient } from '../generated/client.js';
import { PRISMA_POOL } from './pg-pool.js';

/**
 * The Prisma client, built on the app's pg.Pool (the one IdempotencyModule has): inside an
 * `@Idempotent()` request its queries and its `$transaction`s join the request's transaction.
 */
@Injectable()
export class PrismaService extends PrismaClient implements OnModuleDestroy {
  constructor(@Inject(PRISMA_POOL) pool: Pool) {
    super({ adapter: new PrismaPg(pool) });
  }

  async onModuleDestroy(): Promise<void> {
    // The pool is the app's: PrismaPg leaves an external pool open; PoolShutdown ends it.
    await this.$disconnect();
  }
}
