// app.module.ts: @nestjs-cls/transactional with its TypeORM adapter, next to IdempotencyModule
import { Module } from '@nestjs/common';
import { getDataSourceToken, TypeOrmModule } from '@nestjs/typeorm';
import { ClsPluginTransactional } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { ClsModule } from 'nestjs-cls';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule } from 'nestjs-idempotency-pg';

@Module({
  imports: [
    TypeOrmModule.forRoot({
      type: 'postgres',
      url: process.env.DATABASE_URL,
      migrations: [...IDEMPOTENCY_MIGRATIONS],
      migrationsRun: true,
    }),
    ClsModule.forRoot({
      global: true,
      interceptor: { mount: true },
      plugins: [
        new ClsPluginTransactional({
          imports: [TypeOrmModule],
          // The same DataSource as IdempotencyModule's (the default one here, or the
          // `dataSource` option's name): the adapter's transactions then join the request's.
          adapter: new TransactionalAdapterTypeOrm({ dataSourceToken: getDataSourceToken() }),
        }),
      ],
    }),
    IdempotencyModule.forRoot({ tenant: (request) => request.headers['x-tenant-id'] as string }),
  ],
})
export class AppModule {}
