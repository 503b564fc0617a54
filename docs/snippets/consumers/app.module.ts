import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule } from 'nestjs-idempotency-pg';
import { Settlement } from './settlement.entity.js';
import { SettlementsConsumer } from './settlements.consumer.js';

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      entities: [Settlement],
      migrations: [...IDEMPOTENCY_MIGRATIONS],
      migrationsRun: true,
    }),
    TypeOrmModule.forFeature([Settlement]),
    IdempotencyModule.forRoot({ globalKeys: true }),
  ],
  controllers: [SettlementsConsumer],
})
export class AppModule {}
