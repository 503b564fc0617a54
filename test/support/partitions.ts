import { type DataSource } from 'typeorm';

/** What the partition tests read of the partitioned `idempotency_keys`, by the database's clock. */

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Anything that runs SQL: a TypeORM DataSource, or a pg Client's rows through it. */
type Queryable = Pick<DataSource, 'query'>;

export interface Partition {
  name: string;
  fromAt: Date | null;
  toAt: Date | null;
}

export async function partitions(db: Queryable): Promise<Partition[]> {
  const rows = (await db.query(
    `SELECT partition::text AS name, from_at AS "fromAt", to_at AS "toAt"
     FROM idempotency_key_partitions() WHERE NOT detach_pending`,
  )) as Partition[];
  return rows;
}

/** The partition that holds a key's row (undefined: no row). */
export async function partitionOf(db: Queryable, key: string): Promise<string | undefined> {
  const rows = (await db.query(
    'SELECT tableoid::regclass::text AS name FROM idempotency_keys WHERE key = $1',
    [key],
  )) as { name: string }[];
  if (rows.length > 1) throw new Error(`key ${key} has ${rows.length} rows`);
  return rows[0]?.name;
}

/** The database's clock minus this process's: partitions are cut by the database's time. */
async function clockOffsetMs(db: Queryable): Promise<number> {
  const before = Date.now();
  const [{ now }] = (await db.query('SELECT clock_timestamp() AS now')) as { now: Date }[];
  return now.getTime() - (before + Date.now()) / 2;
}

/** Waits until the database's clock reads `at`, less `leadMs`. */
export async function untilDatabaseTime(db: Queryable, at: Date, leadMs = 0): Promise<void> {
  const wait = at.getTime() - leadMs - (await clockOffsetMs(db)) - Date.now();
  if (wait > 0) await sleep(wait);
}

/**
 * The next boundary between two partitions at least `marginMs` away, by the database's clock:
 * the end of the live partition, or of the one after it.
 */
export async function nextBoundary(db: Queryable, marginMs: number): Promise<Date> {
  const [{ now }] = (await db.query('SELECT clock_timestamp() AS now')) as { now: Date }[];
  const ends = (await partitions(db))
    .map((p) => p.toAt)
    .filter((end): end is Date => end !== null && end.getTime() - now.getTime() >= marginMs)
    .sort((a, b) => a.getTime() - b.getTime());
  if (ends.length === 0) throw new Error('no partition boundary ahead: were partitions made?');
  return ends[0];
}

/** Where a burst's claims started, by their partitions: before the boundary, after, or both. */
export type Side = 'before' | 'after' | 'both';

/**
 * Fires bursts of simultaneous requests just before partition boundaries until one straddles
 * its boundary (`fire` says where its claims landed), at most `attempts` times. Each burst is
 * fired `leadMs` ahead of its boundary by the database's clock; a burst that lands all on one
 * side moves the next one a few milliseconds the other way.
 */
export async function straddleBoundary(
  db: Queryable,
  fire: (attempt: number, boundary: Date) => Promise<Side>,
  // Each attempt waits for the next boundary (a second apart) and moves the burst 2 ms: 30 of
  // them sweep 60 ms either way, which a loaded machine's scheduling needs (10 fell short).
  attempts = 30,
): Promise<number> {
  let leadMs = 4;
  for (let attempt = 0; attempt < attempts; attempt++) {
    const boundary = await nextBoundary(db, 200);
    await untilDatabaseTime(db, boundary, leadMs);
    const side = await fire(attempt, boundary);
    if (side === 'both') return attempt;
    leadMs += side === 'before' ? -2 : 2;
  }
  throw new Error(`no burst straddled a partition boundary in ${attempts} attempts`);
}

/** Which side of `boundary` the rows in these partitions were placed. */
export async function sidesOf(db: Queryable, boundary: Date, names: string[]): Promise<Side> {
  const all = await partitions(db);
  const ends = names.map((name) => all.find((p) => p.name === name)?.toAt?.getTime());
  const before = ends.some((end) => end !== undefined && end <= boundary.getTime());
  const after = ends.some((end) => end === undefined || end > boundary.getTime());
  return before && after ? 'both' : before ? 'before' : 'after';
}
