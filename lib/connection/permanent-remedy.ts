/** PostgreSQL's error, as node-postgres gives it: the fields the remedy reads. */
interface DatabaseError {
  code?: unknown;
  message?: unknown;
}

const MIGRATIONS_OR_SCHEMA =
  "the library's migrations (IDEMPOTENCY_MIGRATIONS) or the package's migrations/schema.sql";

/**
 * What an operator does about a refusal of the library's own statement that no retry passes
 * (see `PERMANENT_STATES`), in words, for the log: the statement's SQL is the library's, so its
 * failure says the schema or the role differs from what the migrations leave. The start-up
 * check finds these before the first request; this is for a change made after it ran.
 */
export function permanentRemedy(error: unknown): string {
  const { code, message } = (error ?? {}) as DatabaseError;
  const said = typeof message === 'string' ? message : String(error);
  switch (code) {
    case '23502':
      return (
        `${said}: a column the library's inserts leave to its DEFAULT has lost it; restore it ` +
        `as ${MIGRATIONS_OR_SCHEMA} define it (the CLI's doctor lists the differences)`
      );
    case '42P10':
      return (
        `${said}: the table has no primary key or unique index on the columns the library's ` +
        `ON CONFLICT names; restore it as ${MIGRATIONS_OR_SCHEMA} define it`
      );
    case '42P01':
    case '42703':
    case '42883':
      return `${said}: run ${MIGRATIONS_OR_SCHEMA}`;
    case '42501':
      return (
        `${said}: grant the app's role SELECT, INSERT, UPDATE, DELETE on the library's tables ` +
        '(idempotency_keys, processed_messages, message_failures, idempotency_response_bodies); ' +
        // PostgreSQL's words for the two (must be owner, permission denied for schema) follow
        // lc_messages and carry no field to tell them apart: both are named (adversary 109).
        'under partitionedExpiry the role also makes the partitions ahead, which needs the ' +
        "table owner's role and CREATE on its schema (GRANT <owner> TO <role>; GRANT CREATE ON " +
        'SCHEMA <schema> TO <role>; the start-up check names them)'
      );
    case '22021':
    case '22P05':
      return (
        `${said}: a text the library sent for a key (its tenant, its key, a job's queue name, ` +
        'prefix or id) holds a character PostgreSQL cannot store (a NUL, or one the ' +
        "database's encoding lacks); give it one without"
      );
    default:
      return said;
  }
}
