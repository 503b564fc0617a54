/**
 * The name the library gives TypeORM's savepoint of its code's outermost transaction on a
 * runner (the runner's depth 1 is the request's transaction, so TypeORM's `startTransaction()`
 * there is a savepoint): without the library that level is the runner's own `BEGIN`, which has
 * no name its code could reach for (a `ROLLBACK TO SAVEPOINT` of it fails there too).
 */
export const OUTERMOST_SAVEPOINT = 'idempotency_typeorm_transaction';

/** TypeORM's PostgresQueryRunner's savepoint statements, exactly as it sends them. */
const TYPEORM_SAVEPOINT = /^(SAVEPOINT|RELEASE SAVEPOINT|ROLLBACK TO SAVEPOINT) typeorm_(\d+)$/;

/**
 * TypeORM's own savepoint statement `text` (`SAVEPOINT typeorm_${depth}`, its RELEASE and
 * ROLLBACK TO) named as it is without the library. TypeORM names a nested transaction's
 * savepoint by the runner's depth, and under the library the request's transaction is the
 * runner's depth 1: its code's first transaction would take `typeorm_1`, its first nested one
 * `typeorm_2`, one more than without the library. Code that reaches for a savepoint by the
 * name TypeORM gives it (`ROLLBACK TO SAVEPOINT typeorm_1`, its first nested transaction's)
 * would reach the one around it (adversary 83). So each is sent one lower, and the outermost
 * under a name of the library's (`OUTERMOST_SAVEPOINT`). Any other text is left as it is.
 */
export function typeormSavepointAsWithout(text: unknown): unknown {
  if (typeof text !== 'string') return text;
  const match = TYPEORM_SAVEPOINT.exec(text);
  if (!match) return text;
  const depth = Number(match[2]);
  if (!Number.isSafeInteger(depth) || depth < 1) return text;
  return `${match[1]} ${depth === 1 ? OUTERMOST_SAVEPOINT : `typeorm_${depth - 1}`}`;
}
