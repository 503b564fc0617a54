// src/app.module.ts, on Fastify with Mercurius
import { Module } from '@nestjs/common';
import { GraphQLModule } from '@nestjs/graphql';
import { MercuriusDriver, type MercuriusDriverConfig } from '@nestjs/mercurius';
import { TypeOrmModule } from '@nestjs/typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule } from 'nestjs-idempotency-pg';
import { CreateTransfers1767225600000 } from './create-transfers.migration.js';
import { Transfer } from './transfer.entity.js';
import { TransfersResolver } from './transfers.resolver.js';

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      entities: [Transfer],
      migrations: [...IDEMPOTENCY_MIGRATIONS, CreateTransfers1767225600000],
      migrationsRun: true,
    }),
    TypeOrmModule.forFeature([Transfer]),
    IdempotencyModule.forRoot({
      tenant: (request) => request.headers['x-tenant-id'] as string,
    }),
    // Nest's default context ({ req }) is what the library reads the request from.
    GraphQLModule.forRoot<MercuriusDriverConfig>({ driver: MercuriusDriver, autoSchemaFile: true }),
  ],
  providers: [TransfersResolver],
})
export class AppModule {}
