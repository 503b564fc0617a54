import { Module, type Provider } from '@nestjs/common';
import { ModuleRef } from '@nestjs/core';
import { getDataSourceToken } from '@nestjs/typeorm';
import { type DataSource } from 'typeorm';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import {
  ConfigurableModuleClass,
  IDEMPOTENCY_MODULE_OPTIONS,
  RESOLVED_IDEMPOTENCY_OPTIONS,
} from './idempotency.module-definition.js';
import { type IdempotencyModuleOptions, type ResolvedIdempotencyOptions } from './idempotency-options.interface.js';
import { InvalidIdempotencyOptionsError, resolveIdempotencyOptions } from './idempotency-options.js';
import { IdempotencyStore } from './storage/idempotency-store.interface.js';
import { PostgresIdempotencyStore } from './storage/postgres-idempotency.store.js';

const resolvedOptionsProvider: Provider = {
  provide: RESOLVED_IDEMPOTENCY_OPTIONS,
  inject: [IDEMPOTENCY_MODULE_OPTIONS],
  useFactory: (options: IdempotencyModuleOptions) => resolveIdempotencyOptions(options),
};

/**
 * The store sits on the app's own DataSource (the default one, or the one named in the
 * options), looked up rather than injected by a fixed token since its name is an option.
 */
const storeProvider: Provider = {
  provide: IdempotencyStore,
  inject: [ModuleRef, RESOLVED_IDEMPOTENCY_OPTIONS],
  useFactory: (moduleRef: ModuleRef, options: ResolvedIdempotencyOptions) => {
    let dataSource: DataSource;
    try {
      dataSource = moduleRef.get<DataSource>(getDataSourceToken(options.dataSource), {
        strict: false,
      });
    } catch {
      throw new InvalidIdempotencyOptionsError(
        `no TypeORM DataSource ${options.dataSource ? `named "${options.dataSource}"` : '(default)'} ` +
          'was found; import TypeOrmModule.forRoot() in the app module',
      );
    }
    if (dataSource.options.type !== 'postgres') {
      throw new InvalidIdempotencyOptionsError(
        `the DataSource is of type "${dataSource.options.type}"; the store needs PostgreSQL`,
      );
    }
    return new PostgresIdempotencyStore(dataSource, options.databaseTimeoutMs);
  },
};

/**
 * Idempotency keys for NestJS on PostgreSQL.
 *
 * @example
 * @Module({
 *   imports: [
 *     TypeOrmModule.forRoot({ type: 'postgres', url: process.env.DATABASE_URL }),
 *     IdempotencyModule.forRoot({ tenant: (req) => req.headers['x-tenant-id'] as string }),
 *   ],
 * })
 * export class AppModule {}
 */
@Module({
  providers: [resolvedOptionsProvider, storeProvider, IdempotencyInterceptor],
  exports: [RESOLVED_IDEMPOTENCY_OPTIONS, IdempotencyStore, IdempotencyInterceptor],
})
export class IdempotencyModule extends ConfigurableModuleClass {}
