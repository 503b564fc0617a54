/**
 * A partition of the keys table with its bounds, as the start-up check reads them; in a file of
 * its own so that the decisions about partitions (partition-ends.ts, library-partitions.ts) can
 * share it without importing each other.
 */

/** A partition with its bounds as milliseconds since 1970 (null: MINVALUE / MAXVALUE). */
export interface PartitionEnd {
  /** Its name with its schema, quoted as SQL takes them. */
  partition: string;
  fromMs: number | null;
  toMs: number | null;
}
