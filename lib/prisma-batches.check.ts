import { Inject, Injectable, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService } from '@nestjs/core';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from './idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from './shapes/idempotency-options.interface.js';
import { prismaBatchingOf } from './data-layers/prisma/prisma-batching.js';
import { PrismaBatchingUnknownError } from './data-layers/prisma/prisma-batching-unknown.error.js';
import { keepBatchesPerScope } from './data-layers/prisma/scoped-batches.js';
import { forgetRequestScoped, watchRequestScoped } from './prisma-request-clients.js';

/**
 * On a node-postgres pool (`pool` option), keeps the batched queries of every Prisma client
 * among the app's providers in the transaction of the request that made them (see
 * `keepBatchesPerScope`), before any request runs; refuses to start if a Prisma client's
 * batching is not one the library knows. Nothing to do on TypeORM, whose DataSource Prisma
 * does not share. A transient provider has an instance per consumer (each looked at); one
 * resolved per request (a client `$extends`-ed for the caller's tenant) has none yet, and is
 * looked at in the first requests that resolve it (see `keepRequestScopedBatches`).
 */
@Injectable()
export class PrismaBatchesCheck implements OnModuleInit {
  constructor(
    private readonly discovery: DiscoveryService,
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
  ) {}

  onModuleInit(): void {
    if (!this.options.pool) return;
    const unknown: string[] = [];
    forgetRequestScoped();
    for (const wrapper of this.discovery.getProviders()) {
      if (!wrapper.isDependencyTreeStatic()) {
        watchRequestScoped(wrapper);
        continue;
      }
      const instances = wrapper.isTransient
        ? wrapper.getStaticTransientInstances().map((host) => host?.instance)
        : [wrapper.instance];
      for (const instance of instances) {
        if (!instance) continue;
        const batching = prismaBatchingOf(instance);
        if (batching.kind === 'loader') keepBatchesPerScope(batching.loader);
        if (batching.kind === 'unknown') unknown.push(String(wrapper.name));
      }
    }
    if (unknown.length > 0) throw new PrismaBatchingUnknownError(unknown);
  }
}
