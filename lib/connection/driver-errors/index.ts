import { drizzleCause } from './drizzle.js';
import { kyselyCause } from './kysely.js';
import { prismaCause } from './prisma.js';

/**
 * The database's error inside a data layer's wrapper (Drizzle's `DrizzleQueryError`, Prisma's
 * client and adapter errors, Kysely's aborted transaction), else undefined: what the library
 * classifies, as it does TypeORM's `QueryFailedError`. Each is read by its shape, so that the
 * library imports none of them.
 */
export function dataLayerCause(error: unknown): unknown {
  return drizzleCause(error) ?? prismaCause(error) ?? kyselyCause(error);
}
