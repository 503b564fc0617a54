import { CreateIdempotencyKeys1764460800000 } from '../migrations/1764460800000-CreateIdempotencyKeys.js';
import { CreateProcessedMessages1764460900000 } from '../migrations/1764460900000-CreateProcessedMessages.js';
import { AddFinishedAt1764461200000 } from '../migrations/1764461200000-AddFinishedAt.js';

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
];
