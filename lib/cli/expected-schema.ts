import { SCHEMA_TABLES } from '../schema/schema-check.js';

/**
 * The tables and columns the library's migrations leave (`IDEMPOTENCY_MIGRATIONS`), with the
 * type PostgreSQL's `format_type()` names for each: the start-up schema check's own list
 * (lib/schema/schema-check.ts), as the doctor reads it, so that the two never disagree.
 */
export const EXPECTED_SCHEMA: Readonly<Record<string, Readonly<Record<string, string>>>> =
  Object.fromEntries(
    SCHEMA_TABLES.map(({ table, columns }) => [
      table,
      Object.fromEntries(columns.map(({ name, type }) => [name, type])),
    ]),
  );
