import { Logger } from '@nestjs/common';
import {
  IdempotencyStoreUnavailableError,
  PermanentDatabaseError,
} from '../../shapes/idempotency.errors.js';

/** PostgreSQL's error, as node-postgres gives it: the fields the explanations read. */
interface DatabaseError {
  code?: unknown;
  message?: unknown;
  hint?: unknown;
  /** The relation the error is about, and the constraint (error fields, in no language). */
  table?: unknown;
  constraint?: unknown;
}

const MIGRATION = 'PartitionIdempotencyKeys1764461600000';

/** The table is partitioned and the app's options do not say so (also the start-up check's). */
export const LAYOUT_PARTITIONED_UNEXPECTED =
  'idempotency_keys is partitioned (the PartitionIdempotencyKeys migration ran), but ' +
  'partitionedExpiry is off: turn it on in IdempotencyModule.forRoot(), or revert that migration';

/** The plain CLAIM's ON CONFLICT found no unique index on (tenant_id, key) to infer. */
export const KEYS_WITHOUT_CONFLICT_KEY =
  "idempotency_keys has no primary key or unique index on (tenant_id, key), which the claim's " +
  'ON CONFLICT needs: if the PartitionIdempotencyKeys migration ran, turn partitionedExpiry on ' +
  'in IdempotencyModule.forRoot() (or revert that migration); otherwise restore the primary key ' +
  '(ALTER TABLE idempotency_keys ADD PRIMARY KEY (tenant_id, key))';

/** The app's options say partitioned and the table is not (also the start-up check's). */
export const LAYOUT_NOT_PARTITIONED =
  'partitionedExpiry is on, but idempotency_keys is not partitioned: run the ' +
  `${MIGRATION} migration (see the README's "Partitioned expiry")`;

/**
 * What a store failure means when the table's layout and the app's `partitionedExpiry` do not
 * agree, said in words that tell the user what to do; undefined for any other failure. Both
 * mismatches otherwise surface as PostgreSQL's own words about an ON CONFLICT clause or a
 * missing function, on every claim.
 */
export function explainLayoutError(error: unknown): string | undefined {
  const { code, message, hint } = (error ?? {}) as DatabaseError;
  const text = typeof message === 'string' ? message : '';
  if (code === '42P10') {
    // Not necessarily partitioned: a plain table whose primary key was dropped says the same.
    return KEYS_WITHOUT_CONFLICT_KEY;
  }
  if (code === '42883' && /idempotency_(claim|keys_create_partitions)/.test(text)) {
    return LAYOUT_NOT_PARTITIONED;
  }
  if (code === '55000' && text.startsWith('idempotency_claim needs READ COMMITTED')) {
    return typeof hint === 'string' ? `${text}. ${hint}` : text;
  }
  return undefined;
}

/**
 * Whether an insert found no partition for its time: the partitions ran out. Read from the
 * SQLSTATE and error fields, not the message, which follows the server's `lc_messages`
 * ("keine Partition ..." in German): PostgreSQL's routing failure is a 23514 about the
 * partitioned table itself with no constraint named, where a CHECK constraint's names it and a
 * row put straight into a partition outside its range names that partition.
 */
export function isNoPartitionError(error: unknown): boolean {
  const { code, table, constraint } = (error ?? {}) as DatabaseError;
  return code === '23514' && table === 'idempotency_keys' && constraint === undefined;
}

const logger = new Logger('Idempotency');

/**
 * Rethrows a store failure, explained (and logged, where operators look) when it is a layout
 * mismatch, as the permanent 500 it is. For `.catch()` on a store call.
 */
export function rethrowExplained(error: unknown): never {
  const cause =
    error instanceof IdempotencyStoreUnavailableError || error instanceof PermanentDatabaseError
      ? error.cause
      : error;
  const explanation = explainLayoutError(cause);
  if (explanation === undefined) throw error;
  logger.error(explanation);
  // It lasts until the options or the table change: a 500, not a 503 to retry.
  throw new PermanentDatabaseError(new Error(explanation, { cause }), explanation);
}
