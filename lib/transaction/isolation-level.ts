import { type IsolationLevel, ISOLATION_LEVELS } from '../shapes/isolation-level.js';
export { type IsolationLevel, ISOLATION_LEVELS } from '../shapes/isolation-level.js';

/** Whether `value` is one of PostgreSQL's isolation levels, spelled as TypeORM does. */
export function isIsolationLevel(value: unknown): value is IsolationLevel {
  return (ISOLATION_LEVELS as readonly unknown[]).includes(value);
}

/** PostgreSQL runs READ UNCOMMITTED as READ COMMITTED: the two are equally strong. */
function strength(level: IsolationLevel): number {
  return level === 'READ UNCOMMITTED' ? 1 : ISOLATION_LEVELS.indexOf(level);
}

/** The stronger of two levels (the first when they are equally strong). */
export function stronger(a: IsolationLevel, b: IsolationLevel): IsolationLevel {
  return strength(b) > strength(a) ? b : a;
}

/** Whether a transaction at `level` runs above READ COMMITTED (its reads must be in it). */
export function isAboveReadCommitted(level: IsolationLevel | undefined): boolean {
  return level !== undefined && strength(level) > strength('READ COMMITTED');
}

/**
 * Where the request's transaction stands when code in it asks for an isolation level:
 * not begun yet (the `BEGIN` is still to be sent, at `planned` if the route or DataSource
 * set one), or begun at `current`.
 */
export type IsolationState =
  { begun: false; planned?: IsolationLevel } | { begun: true; current: IsolationLevel };

/**
 * What a nested transaction's isolation level does to the request's transaction:
 * - `begin-at`: nothing was sent yet, so the request's transaction begins at `level` (the
 *   stronger of the planned level and the one asked for);
 * - `join`: it runs as a savepoint of a transaction at least that strong;
 * - `refuse`: the transaction already began at a weaker level, which PostgreSQL cannot raise,
 *   and running it weaker would silently lose what the level was asked for.
 */
export type IsolationDecision =
  | { kind: 'begin-at'; level: IsolationLevel }
  | { kind: 'join' }
  | { kind: 'refuse'; reason: string };

export function decideIsolation(
  asked: string | undefined,
  state: IsolationState,
): IsolationDecision {
  if (asked === undefined) return { kind: 'join' };
  if (!isIsolationLevel(asked)) {
    return {
      kind: 'refuse',
      reason: `${asked} is not an isolation level of PostgreSQL (${ISOLATION_LEVELS.join(', ')})`,
    };
  }
  if (!state.begun) {
    const level = state.planned ? stronger(state.planned, asked) : asked;
    return { kind: 'begin-at', level };
  }
  if (strength(asked) <= strength(state.current)) return { kind: 'join' };
  return {
    kind: 'refuse',
    reason:
      `the request's transaction already began at ${state.current}, and PostgreSQL cannot ` +
      `raise a transaction's isolation level once it began. Set it on the route, ` +
      `@Idempotent({ isolationLevel: '${asked}' }), or make this transaction the handler's ` +
      `first database work`,
  };
}
