import { Logger } from '@nestjs/common';
import { IdempotencyStoreMisconfiguredError } from '../shapes/idempotency.errors.js';

/**
 * SQLSTATEs of named prepared statements that a session does not hold as its client believes:
 * `26000` (one it prepared is not there) and `42P05` (one it is preparing is there already).
 * Both mean the server session behind the connection changes between transactions, as a
 * pooler in transaction mode does (PgBouncer, Supavisor, RDS Proxy), and neither passes.
 */
const PREPARED_STATEMENT_STATES = new Set(['26000', '42P05']);

/**
 * One of the library's named statements (all named `idempotency_…_v<n>`) in PostgreSQL's words,
 * in whatever language its `lc_messages` speaks (the name is quoted as that language quotes).
 */
const LIBRARY_STATEMENT = /(?<![\p{L}\p{N}_])idempotency_[a-z0-9_]*_v\d+/u;

/** PostgreSQL's error as node-postgres gives it, or under TypeORM's `driverError`. */
interface DatabaseError {
  code?: unknown;
  message?: unknown;
  driverError?: unknown;
}

/**
 * What a store failure means when the connection is shared by a pooler in transaction mode,
 * in words that say what to change; undefined for any other failure.
 */
export function explainPoolerMisfit(error: unknown): string | undefined {
  for (const candidate of [error, (error as DatabaseError | undefined)?.driverError]) {
    if (!candidate || typeof candidate !== 'object') continue;
    const { code, message } = candidate as DatabaseError;
    if (typeof code !== 'string' || !PREPARED_STATEMENT_STATES.has(code)) continue;
    // The library's own statements only: the app's (a handler's `PREPARE`, a named query of
    // its own) failing so is its own failure, which no setting of the library's would mend.
    if (typeof message !== 'string' || !LIBRARY_STATEMENT.test(message)) continue;
    return (
      `${message} (SQLSTATE ${code}): the library's named prepared statements live in one ` +
      'database session, and this connection shares its sessions between transactions, as a ' +
      "pooler in transaction mode does (PgBouncer, Supavisor, RDS Proxy). Set pooler: 'transaction' " +
      'in IdempotencyModule.forRoot() (its statements are then sent unnamed), or connect ' +
      'directly or through a pooler in session mode (see the README\'s "Behind a connection pooler")'
    );
  }
  return undefined;
}

const logger = new Logger('Idempotency');

/**
 * The library's 500 for a pooler misfit, logged with what to change (where operators look);
 * undefined for any other failure, which the caller handles as before.
 */
export function misconfigured(error: unknown): IdempotencyStoreMisconfiguredError | undefined {
  if (error instanceof IdempotencyStoreMisconfiguredError) return error;
  const explanation = explainPoolerMisfit(error);
  if (explanation === undefined) return undefined;
  logger.error(explanation);
  return new IdempotencyStoreMisconfiguredError(error, explanation);
}
