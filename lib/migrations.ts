import { CreateIdempotencyKeys1764460800000 } from '../migrations/1764460800000-CreateIdempotencyKeys.js';

/**
 * The library's migrations, in order, for the app's DataSource:
 *
 * @example
 * TypeOrmModule.forRoot({ ..., migrations: [...IDEMPOTENCY_MIGRATIONS], migrationsRun: true })
 */
export const IDEMPOTENCY_MIGRATIONS = [CreateIdempotencyKeys1764460800000];
