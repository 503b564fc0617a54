import { Module } from '@nestjs/common';
import { ConfigModule, ConfigService } from './config.js';
import { IdempotencyModule } from 'nestjs-idempotency-pg';

@Module({
  imports: [
    IdempotencyModule.forRootAsync({
      imports: [ConfigModule],
      inject: [ConfigService],
      useFactory: (config: ConfigService) => ({
        tenant: (request) => request.headers['x-tenant-id'] as string,
        retentionMs: config.retentionMs,
        dataSource: 'payments', // a named TypeORM DataSource; the default one when left out
      }),
    }),
  ],
})
export class AppModule {}
