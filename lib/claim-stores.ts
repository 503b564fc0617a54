import { Inject, Injectable } from '@nestjs/common';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from './idempotency.module-definition.js';
import {
  type ResolvedIdempotencyOptions,
  type ResolvedRouteOptions,
} from './shapes/idempotency-options.interface.js';
import { type RouteClaimStore } from './claim/route-claim-store.js';
import { POSTGRES_CLAIM_STORE } from './idempotency-options.js';
import { type ClaimStore } from './shapes/claim-store.interface.js';
import { IdempotencyDatabase } from './data-layers/idempotency-database.js';
import { PostgresClaimStore } from './claim/postgres-claim.store.js';
import { PartitionedPostgresClaimStore } from './claim/partitioned/partitioned-postgres-claim.store.js';
import { ResponseSealer } from './answer/response-sealer.js';
import { SealingClaimStore } from './answer/sealing-claim.store.js';
import { PointingClaimStore } from './answer/bodies/pointing-claim.store.js';
import { PostgresBodyStore } from './answer/bodies/postgres-body.store.js';
import { type ResponseBodyStore } from './shapes/response-body-store.interface.js';

/**
 * The module's claim stores by name: the app's PostgreSQL (`'postgres'`, on the partitioned
 * table with `partitionedExpiry`) and those the app gave in `claimStores`. Every one seals its
 * responses when encryption is configured, and stores large bodies by pointer when
 * `largeResponses` is set, so that a route's choice of store never changes what is kept in
 * clear, nor where a body is.
 */
@Injectable()
export class ClaimStores {
  private readonly stores = new Map<string, ClaimStore>();
  /** Where large bodies go, when they are stored by pointer. */
  readonly bodies?: ResponseBodyStore;

  constructor(
    database: IdempotencyDatabase,
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) options: ResolvedIdempotencyOptions,
  ) {
    const sealer = options.sealingKeys && new ResponseSealer(options.sealingKeys);
    const large = options.largeResponses;
    this.bodies = large && (large.store ?? new PostgresBodyStore(database));
    // Sealed first, then moved out by pointer: the body store holds only ciphertext.
    const layered = (store: ClaimStore) =>
      new SealingClaimStore(
        large ? new PointingClaimStore(store, this.bodies!, large.overBytes) : store,
        sealer,
      );
    const postgres = options.partitionedExpiry
      ? new PartitionedPostgresClaimStore(database, options.partitionedExpiry)
      : new PostgresClaimStore(database);
    this.stores.set(POSTGRES_CLAIM_STORE, layered(postgres));
    for (const [name, store] of Object.entries(options.claimStores)) {
      this.stores.set(name, layered(store));
    }
  }

  /** The store of that name; undefined when the module has none (the start-up check says so). */
  get(name: string): ClaimStore | undefined {
    return this.stores.get(name);
  }

  /** What the route-placement rule needs to know of a route's store. */
  forRoute(route: ResolvedRouteOptions): RouteClaimStore {
    return {
      name: route.claimStore,
      known: [...this.stores.keys()],
      transactional: this.stores.get(route.claimStore)?.transactional,
      atomic: route.atomic,
      oneCommit: route.oneCommit,
    };
  }

  /** Every store with its name. */
  entries(): [string, ClaimStore][] {
    return [...this.stores.entries()];
  }
}
