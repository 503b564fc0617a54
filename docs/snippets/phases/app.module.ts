import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule } from 'nestjs-idempotency-pg';
import { Charge } from './charge.entity.js';
import { ChargesController } from './charges.controller.js';
import { ChargesService } from './charges.service.js';
import { CreateCharges1767225600000 } from './create-charges.migration.js';
import { PspClient } from './psp.client.js';

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      entities: [Charge],
      migrations: [...IDEMPOTENCY_MIGRATIONS, CreateCharges1767225600000],
      migrationsRun: true,
    }),
    // One key space for every client here; `tenant` scopes keys per client (the quick start).
    IdempotencyModule.forRoot({ globalKeys: true }),
  ],
  controllers: [ChargesController],
  providers: [ChargesService, PspClient],
})
export class AppModule {}
