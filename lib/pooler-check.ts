import { Injectable, type OnApplicationBootstrap } from '@nestjs/common';
import { IdempotencyDatabase } from './data-layers/idempotency-database.js';

/** The start-up refusal of `pooler: 'none'` behind a pooler (see `poolerSignature`). */
export class PoolerMisconfiguredError extends Error {
  override readonly name = 'PoolerMisconfiguredError';
}

/**
 * Asks, when the app starts, whether a pooler stands between it and PostgreSQL, so that the
 * library's first statement already runs as it must: with no `pooler` set it adapts (and says
 * so once); with `pooler: 'none'` it refuses to start, rather than failing request by request
 * later. A database that cannot be reached then is asked again before the next statement.
 */
@Injectable()
export class IdempotencyPoolerCheck implements OnApplicationBootstrap {
  constructor(private readonly database: IdempotencyDatabase) {}

  async onApplicationBootstrap(): Promise<void> {
    await this.database.probePooler();
    const refusal = this.database.poolerRefusal();
    if (refusal) throw new PoolerMisconfiguredError(refusal);
  }
}
