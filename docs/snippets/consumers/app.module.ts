import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule } from 'nestjs-idempotency-pg';
import { CreateSettlements1767225600000 } from './create-settlements.migration.js';
import { Settlement } from './settlement.entity.js';
import { SettlementsConsumer } from './settlements.consumer.js';

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      entities: [Settlement],
      migrations: [...IDEMPOTENCY_MIGRATIONS, CreateSettlements1767225600000],
      migrationsRun: true,
    }),
    TypeOrmModule.forFeature([Settlement]),
    IdempotencyModule.forRoot({ globalKeys: true }),
  ],
  controllers: [SettlementsConsumer],
})
export class AppModule {}
