import { Module } from '@nestjs/common';
import { Redis } from 'ioredis';
import { IdempotencyModule } from 'nestjs-idempotency-pg';
import { RedisClaimStore } from 'nestjs-idempotency-pg/redis';
import { ExportsController } from './exports.controller.js';

@Module({
  imports: [
    IdempotencyModule.forRoot({
      tenant: (req) => req.headers['x-tenant-id'] as string,
      claimStores: { redis: new RedisClaimStore(new Redis(process.env.REDIS_URL!)) },
    }),
  ],
  controllers: [ExportsController],
})
export class ExportsModule {}
