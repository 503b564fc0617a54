// src/app.module.ts
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import { GraphQLModule } from '@nestjs/graphql';
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
      // The HTTP request the operation came in: Apollo's and Mercurius' context both hold it.
      tenant: (request) => request.headers['x-tenant-id'] as string,
    }),
    GraphQLModule.forRoot<ApolloDriverConfig>({ driver: ApolloDriver, autoSchemaFile: true }),
  ],
  providers: [TransfersResolver],
})
export class AppModule {}
