import { type PoolClient, type QueryResult } from 'pg';
import { PrefixedQuery, queryStatement, type QueryStatement, send } from './prefixed-query.js';
import { CAPTURE_SESSION_STATE } from './session-state.js';

/** A statement `beginWith` carries: its text and parameters, with how its rows are read. */
export type CarriedStatement = QueryStatement & { values: unknown[] };

/**
 * The statement `beginWith` can carry, from a query's arguments: one node-postgres would send
 * as it is (`queryStatement`) with parameters (the extended protocol; TypeORM sends every write
 * with parameters, Prisma and Drizzle a config object with `values`); else undefined.
 */
export function carriedStatement(args: unknown[]): CarriedStatement | undefined {
  const statement = queryStatement(args);
  // One bounded by node-postgres' `query_timeout` is not: its timeout would fire on the round
  // trip of the `BEGIN` too, and leave the transaction's opening undecided. Sent after it.
  if (statement?.query_timeout !== undefined) return undefined;
  return statement?.values !== undefined && statement.values.length > 0
    ? (statement as CarriedStatement)
    : undefined;
}

/**
 * node-postgres' own prepared query, with the transaction's `BEGIN` in front of it, before the
 * Sync that ends the round trip (`PrefixedQuery`): a transaction opens with its first
 * statement in one round trip, not two. A `BEGIN` that fails never lets the statement behind
 * it run (and commit on its own); a `BEGIN` inside the implicit block of a Sync turns it into
 * an ordinary transaction block that the Sync leaves open. Behind the `BEGIN`, the role and
 * search path the transaction begins with are kept on the server (`CAPTURE_SESSION_STATE`),
 * unreported: the library's own statements run with them.
 */
class BeginThenQuery extends PrefixedQuery {
  constructor(
    /** The `BEGIN` sent in front (public: the statement-count tests read it). */
    readonly begin: string,
    ...rest: ConstructorParameters<typeof PrefixedQuery>
  ) {
    super(...rest);
  }
}

/**
 * Sends `begin` and the statement in one round trip. `result` settles with the statement;
 * `begun` resolves once `BEGIN` completed, and rejects (with the round trip's error) when it
 * did not: statements sent after it must then not run, as they would run outside any
 * transaction.
 */
export function beginWith(
  client: PoolClient,
  begin: string,
  statement: CarriedStatement | string,
  values: unknown[] = [],
  /** `fields`: the captured row (see `begunStateOf`). */
  onCaptured?: (readOnly: boolean, fields: unknown[]) => void,
): { result: Promise<QueryResult>; begun: Promise<void> } {
  const config = typeof statement === 'string' ? { text: statement, values } : statement;
  let begunNow!: () => void;
  let notBegun!: (error: Error) => void;
  const begun = new Promise<void>((resolve, reject) => {
    begunNow = resolve;
    notBegun = reject;
  });
  // Observed here too, so that a BEGIN that failed is never an unhandled rejection.
  begun.catch(() => undefined);
  const result = new Promise<QueryResult>((resolve, reject) => {
    const query: BeginThenQuery = new BeginThenQuery(
      begin,
      [
        { text: begin, onComplete: () => begunNow() },
        // Its one row: the last column says whether the transaction began read only.
        {
          text: CAPTURE_SESSION_STATE,
          onRow: (fields) => onCaptured?.(String(fields[fields.length - 1]) === 'on', fields),
        },
      ],
      config,
      (error, outcome) => {
        if (error) {
          if (query.completed === 0) notBegun(error);
          reject(error);
        } else {
          resolve(outcome!);
        }
      },
    );
    send(client, query);
  });
  return { result, begun };
}
