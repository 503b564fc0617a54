import { BullModule } from '@nestjs/bullmq';
import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule } from 'nestjs-idempotency-pg';
import { Payout } from './payout.entity.js';
import { PayoutsProcessor } from './payouts.processor.js';

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      entities: [Payout],
      migrations: [...IDEMPOTENCY_MIGRATIONS],
      migrationsRun: true,
    }),
    TypeOrmModule.forFeature([Payout]),
    // A worker without HTTP routes: its jobs' keys are kept per queue.
    IdempotencyModule.forRoot({ globalKeys: true }),
    BullModule.forRoot({ connection: { host: '127.0.0.1', port: 6379 } }),
    BullModule.registerQueue({ name: 'payouts' }),
  ],
  providers: [PayoutsProcessor],
})
export class AppModule {}
