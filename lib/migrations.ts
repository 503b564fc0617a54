import { CreateIdempotencyKeys1764460800000 } from '../migrations/1764460800000-CreateIdempotencyKeys.js';
import { CreateProcessedMessages1764460900000 } from '../migrations/1764460900000-CreateProcessedMessages.js';
import { AddFinishedAt1764461200000 } from '../migrations/1764461200000-AddFinishedAt.js';
import { TextTenantIds1764461300000 } from '../migrations/1764461300000-TextTenantIds.js';
import { CreateMessageFailures1764461400000 } from '../migrations/1764461400000-CreateMessageFailures.js';
import { CreateResponseBodies1764461500000 } from '../migrations/1764461500000-CreateResponseBodies.js';
import { AddLeasedAt1764461700000 } from '../migrations/1764461700000-AddLeasedAt.js';
import { PinPartitionFunctions1764461800000 } from '../migrations/1764461800000-PinPartitionFunctions.js';

/**
 * Opt-in, and not in `IDEMPOTENCY_MIGRATIONS`: partitions `idempotency_keys` by time for the
 * module's `partitionedExpiry`. List it after them; revert it to go back to the plain table.
 *
 * @example
 * migrations: [...IDEMPOTENCY_MIGRATIONS, PartitionIdempotencyKeys1764461600000, ...yours]
 */
export { PartitionIdempotencyKeys1764461600000 } from '../migrations/1764461600000-PartitionIdempotencyKeys.js';

/**
 * In `IDEMPOTENCY_MIGRATIONS`; also named alone for an app without TypeORM migrations (its
 * tables from migrations/schema.sql, which holds no partitioned layout): it runs
 * `PartitionIdempotencyKeys1764461600000` and this once with a DataSource of their own.
 */
export { PinPartitionFunctions1764461800000 };

/**
 * The library's migrations, in order, for the app's DataSource:
 *
 * @example
 * TypeOrmModule.forRoot({ ..., migrations: [...IDEMPOTENCY_MIGRATIONS, ...yours], migrationsRun: true })
 */
export const IDEMPOTENCY_MIGRATIONS = [
  CreateIdempotencyKeys1764460800000,
  CreateProcessedMessages1764460900000,
  AddFinishedAt1764461200000,
  TextTenantIds1764461300000,
  CreateMessageFailures1764461400000,
  CreateResponseBodies1764461500000,
  AddLeasedAt1764461700000,
  PinPartitionFunctions1764461800000,
];
