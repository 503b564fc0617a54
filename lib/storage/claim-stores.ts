import { Inject, Injectable } from '@nestjs/common';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from '../idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from '../idempotency-options.interface.js';
import { POSTGRES_CLAIM_STORE } from '../idempotency-options.js';
import { type ClaimStore } from './claim-store.interface.js';
import { IdempotencyDatabase } from './idempotency-database.js';
import { PostgresClaimStore } from './postgres-claim.store.js';
import { PartitionedPostgresClaimStore } from './partitioned/partitioned-postgres-claim.store.js';
import { ResponseSealer } from './response-sealer.js';
import { withSealing } from './sealing-claim.store.js';

/**
 * The module's claim stores by name: the app's PostgreSQL (`'postgres'`, on the partitioned
 * table with `partitionedExpiry`) and those the app gave in `claimStores`. Every one seals its
 * responses when encryption is configured, so that a route's choice of store never changes
 * what is kept in clear.
 */
@Injectable()
export class ClaimStores {
  private readonly stores = new Map<string, ClaimStore>();

  constructor(
    database: IdempotencyDatabase,
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) options: ResolvedIdempotencyOptions,
  ) {
    const sealer = options.sealingKeys && new ResponseSealer(options.sealingKeys);
    const postgres = options.partitionedExpiry
      ? new PartitionedPostgresClaimStore(database, options.partitionedExpiry)
      : new PostgresClaimStore(database);
    this.stores.set(POSTGRES_CLAIM_STORE, withSealing(postgres, sealer));
    for (const [name, store] of Object.entries(options.claimStores)) {
      this.stores.set(name, withSealing(store, sealer));
    }
  }

  /** The store of that name; undefined when the module has none (the start-up check says so). */
  get(name: string): ClaimStore | undefined {
    return this.stores.get(name);
  }

  get names(): string[] {
    return [...this.stores.keys()];
  }

  /** Every store, for the purge. */
  all(): ClaimStore[] {
    return [...this.stores.values()];
  }
}
