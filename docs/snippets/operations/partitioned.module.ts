import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  PartitionIdempotencyKeys1764461600000,
} from 'nestjs-idempotency-pg';

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      migrations: [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000],
      migrationsRun: true,
    }),
    IdempotencyModule.forRoot({
      tenant: (req) => req.headers['x-tenant-id'] as string,
      purgeIntervalMs: 60_000,
      partitionedExpiry: true, // or { partitionMs: 3_600_000, partitionsAhead: 2 }
    }),
  ],
})
export class AppModule {}
