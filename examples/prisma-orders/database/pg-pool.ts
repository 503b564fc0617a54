import { Inject, Injectable, type OnApplicationShutdown } from '@nestjs/common';
import { Pool } from 'pg';

/** The app's one pg.Pool: the library's transactions and Prisma's queries share it. */
export const PG_POOL = 'PG_POOL';

/** Injects the app's pg.Pool. */
export const InjectPool = () => Inject(PG_POOL);

/**
 * The pool Prisma is built on: PG_POOL itself, except in the e2e suite's control, which builds
 * Prisma on a pool of its own to show what that costs (its writes commit apart from the answer).
 */
export const PRISMA_POOL = 'PRISMA_POOL';

/** Ends the pool after everything that used it has stopped (Nest closes modules first). */
@Injectable()
export class PoolShutdown implements OnApplicationShutdown {
  constructor(
    @InjectPool() private readonly pool: Pool,
    @Inject(PRISMA_POOL) private readonly prismaPool: Pool,
  ) {}

  async onApplicationShutdown(): Promise<void> {
    if (this.prismaPool !== this.pool) await this.prismaPool.end();
    await this.pool.end();
  }
}
