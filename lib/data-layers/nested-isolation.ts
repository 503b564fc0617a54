/**
 * Whether an isolation level its code names for a transaction it starts on the request's
 * runner (`startTransaction(level)`, `manager.transaction(level, …)`) is weighed against the
 * request's transaction (`askIsolation`: begun at it, or refused if it already began below
 * it). `depth`, the runner's depth before the start (1: the request's own, so this is its
 * code's outermost transaction); `beside`, begun beside another's (see `besideAll`).
 *
 * Its code's outermost is a `BEGIN … ISOLATION LEVEL` without the library, and one begun
 * beside another's runs on a connection of its own there: the level is theirs. A transaction
 * nested in one of its own is a savepoint, and TypeORM sends no level for it (a level cannot
 * change inside a transaction): it runs at the level of the one around it (adversary 85).
 */
export function asksIsolation(depth: number, beside: boolean): boolean {
  return depth <= 1 || beside;
}
