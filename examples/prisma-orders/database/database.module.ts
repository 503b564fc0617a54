import { type DynamicModule, Global, Module } from '@nestjs/common';
import { Pool } from 'pg';
import { PG_POOL, PoolShutdown, PRISMA_POOL } from './pg-pool.js';
import { PrismaService } from './prisma.service.js';

/** The app's pg.Pool and the Prisma client built on it, for every module. */
@Global()
@Module({})
export class DatabaseModule {
  static register(databaseUrl: string, prismaOnOwnPool = false): DynamicModule {
    return {
      module: DatabaseModule,
      providers: [
        { provide: PG_POOL, useFactory: () => new Pool({ connectionString: databaseUrl }) },
        {
          provide: PRISMA_POOL,
          inject: [PG_POOL],
          useFactory: (pool: Pool) =>
            prismaOnOwnPool ? new Pool({ connectionString: databaseUrl }) : pool,
        },
        PoolShutdown,
        PrismaService,
      ],
      exports: [PG_POOL, PrismaService],
    };
  }
}
