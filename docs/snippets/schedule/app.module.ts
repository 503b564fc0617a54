import { Module } from '@nestjs/common';
import { ScheduleModule } from '@nestjs/schedule';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule } from 'nestjs-idempotency-pg';
import { Settlement } from './settlement.entity.js';
import { SettlementTask } from './settlement.task.js';

@Module({
  imports: [
    ScheduleModule.forRoot(),
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      entities: [Settlement],
      migrations: [...IDEMPOTENCY_MIGRATIONS],
      migrationsRun: true,
      synchronize: true,
    }),
    TypeOrmModule.forFeature([Settlement]),
    // An app's tasks' keys are kept per task (`schedule:<name>`), whatever its routes' tenant.
    IdempotencyModule.forRoot({ globalKeys: true }),
  ],
  providers: [SettlementTask],
})
export class AppModule {}
