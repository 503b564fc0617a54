import {
  Inject,
  Injectable,
  Logger,
  type OnApplicationBootstrap,
  type OnApplicationShutdown,
} from '@nestjs/common';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from './idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from './shapes/idempotency-options.interface.js';
import { ReplayCache } from './answer/replay-cache.js';
import { publish } from './events/idempotency-events.js';
import { ClaimStores } from './claim-stores.js';
import { IdempotencyDatabase } from './data-layers/idempotency-database.js';

/**
 * Deletes finished keys older than the retention window, in small batches (the design's
 * statement 6), or with `partitionedExpiry` drops whole partitions past it; keys that never
 * finished are kept, so that a late retry still resumes. Runs on a timer when
 * `purgeIntervalMs` is set; otherwise call `purgeExpired()` from a job.
 */
@Injectable()
export class IdempotencyPurger implements OnApplicationBootstrap, OnApplicationShutdown {
  private readonly logger = new Logger('Idempotency');
  private timer?: NodeJS.Timeout;
  private running?: Promise<number>;
  private stopping = false;

  constructor(
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
    private readonly stores: ClaimStores,
    private readonly database: IdempotencyDatabase,
    private readonly cache: ReplayCache,
  ) {}

  /**
   * Deletes, batch after batch, every key finished longer than `retentionMs` ago, every key
   * left unfinished past `abandonedKeyRetentionMs` (lease expired), and every consumer's
   * message id older than `processedMessagesRetentionMs`; returns how many rows went.
   */
  async purgeExpired(): Promise<number> {
    const { retentionMs, abandonedKeyRetentionMs, processedMessagesRetentionMs, purgeBatchSize } =
      this.options;
    // Each part runs whatever another met: a Redis that is down must not leave the keys
    // table, the bodies or the consumers' ids growing. The first failure is thrown at the end.
    const failures: unknown[] = [];
    const part = async (name: string, run: () => Promise<number>): Promise<number> => {
      try {
        return await this.inBatches(run);
      } catch (error) {
        this.logger.warn(`retention purge of ${name} failed: ${String(error)}`);
        failures.push(error);
        return 0;
      }
    };
    let finished = 0;
    let abandoned = 0;
    for (const [name, store] of this.stores.entries()) {
      finished += await part(`claim store "${name}"`, async () => {
        const deleted = await store.purgeBatch(retentionMs, purgeBatchSize);
        // Entries expire long before a purge could reach them; this is for purges run early.
        for (const { tenantId, key } of deleted) this.cache.delete(tenantId, key);
        return deleted.length;
      });
      abandoned += await part(`claim store "${name}" (abandoned keys)`, () =>
        store.purgeAbandonedBatch(abandonedKeyRetentionMs, purgeBatchSize),
      );
    }
    // Bodies by pointer whose key the purge above just removed, or whose finish failed.
    const bodies = this.stores.bodies;
    if (bodies) await part('response bodies', () => bodies.purgeBatch(retentionMs, purgeBatchSize));
    const processed = await part('processed messages', () =>
      this.database.purgeProcessedBatch(processedMessagesRetentionMs, purgeBatchSize),
    );
    // Failure counts of messages given up or since processed: kept as long as the ids.
    await part('message failures', () =>
      this.database.purgeMessageFailuresBatch(processedMessagesRetentionMs, purgeBatchSize),
    );
    publish('purged', () => ({ finished, abandoned, processedMessages: processed }));
    if (failures.length > 0) throw failures[0];
    return finished + abandoned + processed;
  }

  /** Runs `batch` until it deletes less than a full batch, or the app stops. */
  private async inBatches(batch: () => Promise<number>): Promise<number> {
    let total = 0;
    while (!this.stopping) {
      const deleted = await batch();
      total += deleted;
      if (deleted < this.options.purgeBatchSize) break;
    }
    return total;
  }

  onApplicationBootstrap(): void {
    const interval = this.options.purgeIntervalMs;
    if (!interval) return;
    this.timer = setInterval(() => {
      if (this.running) return; // a slow purge is not stacked on itself
      this.running = this.purgeExpired()
        .catch((error: unknown) => {
          this.logger.warn(`retention purge failed: ${String(error)}`);
          return 0;
        })
        .finally(() => (this.running = undefined));
    }, interval);
    this.timer.unref();
  }

  async onApplicationShutdown(): Promise<void> {
    // The batch under way finishes; the backlog waits for the next start.
    this.stopping = true;
    clearInterval(this.timer);
    await this.running;
  }
}
