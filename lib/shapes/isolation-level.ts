/** PostgreSQL's isolation levels, as `BEGIN ISOLATION LEVEL` and TypeORM spell them. */
export const ISOLATION_LEVELS = [
  'READ UNCOMMITTED',
  'READ COMMITTED',
  'REPEATABLE READ',
  'SERIALIZABLE',
] as const;

export type IsolationLevel = (typeof ISOLATION_LEVELS)[number];
