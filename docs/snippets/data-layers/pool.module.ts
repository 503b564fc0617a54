// src/database.module.ts: one node-postgres pool for the data layer and for the library
import { Global, Inject, Module, type OnApplicationShutdown } from '@nestjs/common';
import { IdempotencyModule } from 'nestjs-idempotency-pg';
import { Pool } from 'pg';

export const PG_POOL = Symbol('PG_POOL');

@Global()
@Module({
  providers: [
    {
      provide: PG_POOL,
      useFactory: () => new Pool({ connectionString: process.env.DATABASE_URL }),
    },
  ],
  exports: [PG_POOL],
})
export class DatabaseModule implements OnApplicationShutdown {
  constructor(@Inject(PG_POOL) private readonly pool: Pool) {}

  // The app owns the pool: the library never ends it.
  onApplicationShutdown() {
    return this.pool.end();
  }
}

@Module({
  imports: [
    DatabaseModule,
    IdempotencyModule.forRootAsync({
      inject: [PG_POOL],
      // Give your data layer this same pool (see the Prisma, Drizzle and Kysely pages).
      useFactory: (pool: Pool) => ({
        pool,
        tenant: (request) => request.headers['x-tenant-id'] as string,
      }),
    }),
  ],
})
export class AppModule {}
