// prisma.service.ts: Prisma on the app's pg.Pool, the one IdempotencyModule is handed
import { Inject, Injectable, type OnModuleDestroy } from '@nestjs/common';
import { PrismaPg } from '@prisma/adapter-pg';
import { Pool } from 'pg';
import { PrismaClient } from './generated/prisma/client.js';

export const PG_POOL = 'PG_POOL';

@Injectable()
export class PrismaService extends PrismaClient implements OnModuleDestroy {
  constructor(@Inject(PG_POOL) pool: Pool) {
    super({ adapter: new PrismaPg(pool) });
  }

  async onModuleDestroy() {
    await this.$disconnect(); // leaves the pool open: it is the app's, not Prisma's
  }
}
