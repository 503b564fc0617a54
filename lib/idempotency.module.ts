import { SqlReaderLoader } from './transaction/sql/sql-reader.loader.js';
import { Module, type Provider } from '@nestjs/common';
import { DiscoveryModule } from '@nestjs/core';
import { IdempotencyInterceptor } from './idempotency.interceptor.js';
import { PhaseRunner } from './phases/phase-runner.service.js';
import { ReplayCache } from './answer/replay-cache.js';
import { IdempotentJobs } from './jobs/idempotent-jobs.service.js';
import { IdempotentTasks } from './tasks/idempotent-tasks.service.js';
import { ProcessedMessages } from './processed-messages.service.js';
import { IdempotencyPurger } from './idempotency-purger.service.js';
import {
  ConfigurableModuleClass,
  IDEMPOTENCY_MODULE_OPTIONS,
  RESOLVED_IDEMPOTENCY_OPTIONS,
} from './idempotency.module-definition.js';
import {
  type IdempotencyModuleOptions,
  type ResolvedIdempotencyOptions,
} from './shapes/idempotency-options.interface.js';
import { resolveIdempotencyOptions } from './idempotency-options.js';
import { IdempotencyDataSource } from './idempotency-data-source.js';
import { IdempotencyDatabase } from './data-layers/idempotency-database.js';
import { poolDataLayer } from './data-layers/data-layer.js';
import { ClaimStores } from './claim-stores.js';
import { ClaimStore } from './shapes/claim-store.interface.js';
import { POSTGRES_CLAIM_STORE } from './idempotency-options.js';
import { IdempotentTransaction } from './idempotent-transaction.service.js';
import { IdempotentRoutesCheck } from './routes/idempotent-routes.check.js';
import { IdempotencyPoolerCheck } from './pooler-check.js';
import { IdempotencySchemaCheck } from './idempotency-schema.check.js';
import { openApiDocumenterProvider } from './openapi/openapi-documenter.js';
import { IdempotencyMetrics } from './events/idempotency-metrics.js';
import { IdempotencyDebugLog } from './events/idempotency-debug-log.js';
import { IdempotentMessageInterceptor } from './messages/idempotent-message.interceptor.js';
import { MessageAckCheck } from './messages/message-ack.check.js';
import { GraphqlReplayMarker } from './graphql/replay-marker.js';
import { PrismaBatchesCheck } from './prisma-batches.check.js';

const resolvedOptionsProvider: Provider = {
  provide: RESOLVED_IDEMPOTENCY_OPTIONS,
  inject: [IDEMPOTENCY_MODULE_OPTIONS],
  useFactory: (options: IdempotencyModuleOptions) => resolveIdempotencyOptions(options),
};

const replayCacheProvider: Provider = {
  provide: ReplayCache,
  inject: [RESOLVED_IDEMPOTENCY_OPTIONS],
  useFactory: ({ replayCache }: ResolvedIdempotencyOptions) =>
    new ReplayCache(replayCache.size, replayCache.bytes, replayCache.ttlMs),
};

const databaseProvider: Provider = {
  provide: IdempotencyDatabase,
  inject: [IdempotencyDataSource, RESOLVED_IDEMPOTENCY_OPTIONS],
  useFactory: (source: IdempotencyDataSource, options: ResolvedIdempotencyOptions) =>
    new IdempotencyDatabase(
      options.pool ? poolDataLayer(options.pool) : () => source.dataSource,
      options.databaseTimeoutMs,
      options.pooler,
    ),
};

/** The app's own PostgreSQL claim store (with its layers), for code that injects `ClaimStore`. */
const defaultClaimStoreProvider: Provider = {
  provide: ClaimStore,
  inject: [ClaimStores],
  useFactory: (stores: ClaimStores) => stores.get(POSTGRES_CLAIM_STORE),
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
  imports: [DiscoveryModule],
  providers: [
    SqlReaderLoader,
    IdempotentRoutesCheck,
    MessageAckCheck,
    PrismaBatchesCheck,
    openApiDocumenterProvider,
    IdempotencyMetrics,
    IdempotencyDebugLog,
    resolvedOptionsProvider,
    replayCacheProvider,
    IdempotencyDataSource,
    databaseProvider,
    IdempotencySchemaCheck,
    IdempotencyPoolerCheck,
    ClaimStores,
    defaultClaimStoreProvider,
    IdempotencyInterceptor,
    IdempotentMessageInterceptor,
    PhaseRunner,
    IdempotentTransaction,
    ProcessedMessages,
    IdempotencyPurger,
    GraphqlReplayMarker,
    IdempotentJobs,
    IdempotentTasks,
  ],
  exports: [
    RESOLVED_IDEMPOTENCY_OPTIONS,
    ReplayCache,
    IdempotencyDataSource,
    IdempotencyDatabase,
    ClaimStores,
    ClaimStore,
    IdempotencyInterceptor,
    IdempotentMessageInterceptor,
    PhaseRunner,
    IdempotentTransaction,
    ProcessedMessages,
    IdempotencyPurger,
    IdempotentJobs,
    IdempotentTasks,
  ],
})
export class IdempotencyModule extends ConfigurableModuleClass {}
