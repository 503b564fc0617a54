import pg, { type PoolClient, type QueryResult } from 'pg';
import { CAPTURE_SESSION_STATE } from './session-state.js';

/** The part of node-postgres' protocol connection that a query writes to. */
interface ProtocolConnection {
  parse(config: { text: string }): void;
  bind(config: object): void;
  execute(config: { portal: string }): void;
}

/** A statement `beginWith` carries: its text and parameters, with how its rows are read. */
export interface CarriedStatement {
  text: string;
  values: unknown[];
  rowMode?: string;
  types?: unknown;
}

type QueryClass = new (
  config: CarriedStatement,
  values: undefined,
  callback: (error: Error | null, result?: QueryResult) => void,
) => object;

const Query = pg.Query as unknown as QueryClass;
const { prepare, handleDataRow, handleCommandComplete } = (
  pg.Query as unknown as {
    prototype: {
      prepare(connection: ProtocolConnection): void;
      handleDataRow(message: unknown): void;
      handleCommandComplete(message: unknown, connection: unknown): void;
    };
  }
).prototype;

/**
 * node-postgres' own prepared query, with the transaction's `BEGIN` parsed, bound and executed
 * in front of it, before the Sync that ends the round trip: a transaction opens with its first
 * statement in one round trip, not two.
 *
 * Why this is safe: in the extended protocol PostgreSQL skips every message up to the Sync
 * after an error, so a `BEGIN` that fails never lets the statement behind it run (and commit
 * on its own); and a `BEGIN` inside the implicit block of a Sync turns it into an ordinary
 * transaction block that the Sync leaves open. `BEGIN`'s own completion is not reported, so
 * the caller (TypeORM) sees the statement's result alone, exactly as without it. Behind the
 * `BEGIN`, the role and search path the transaction begins with are kept on the server
 * (`CAPTURE_SESSION_STATE`), unreported too: the library's own statements run with them.
 */
class BeginThenQuery extends Query {
  /** Whether `BEGIN` completed: a failure after it leaves an open (aborted) transaction. */
  beginReported = false;
  /** Whether the capture of the session's state behind it completed (its row is not ours). */
  private captured = false;

  constructor(
    /** The `BEGIN` sent in front (public: the statement-count test reads it). */
    readonly begin: string,
    config: CarriedStatement,
    callback: (error: Error | null, result?: QueryResult) => void,
    private readonly onBegun: () => void,
    /** With whether the transaction began read only (the capture's last column). */
    private readonly onCaptured?: (readOnly: boolean) => void,
  ) {
    super(config, undefined, callback);
  }

  prepare(connection: ProtocolConnection): void {
    connection.parse({ text: this.begin });
    connection.bind({});
    connection.execute({ portal: '' });
    connection.parse({ text: CAPTURE_SESSION_STATE });
    connection.bind({});
    connection.execute({ portal: '' });
    prepare.call(this, connection);
  }

  handleDataRow(message: unknown): void {
    if (this.captured) {
      handleDataRow.call(this, message);
      return;
    }
    const fields = (message as { fields?: unknown[] }).fields ?? [];
    this.onCaptured?.(String(fields[fields.length - 1]) === 'on');
  }

  handleCommandComplete(message: unknown, connection: unknown): void {
    if (!this.beginReported) {
      this.beginReported = true;
      this.onBegun();
      return;
    }
    if (!this.captured) {
      this.captured = true;
      return;
    }
    handleCommandComplete.call(this, message, connection);
  }
}

/**
 * The statement `beginWith` can carry, from a query's arguments: one with parameters (the
 * extended protocol; TypeORM sends every write with parameters, Prisma and Drizzle a config
 * object with `values`) and no name of its own (node-postgres keeps a named statement's parse
 * state per name, and the `BEGIN` in front would confuse it), with no callback; else undefined.
 */
export function carriedStatement(args: unknown[]): CarriedStatement | undefined {
  if (args.length === 2 && typeof args[0] === 'string' && isParameters(args[1])) {
    return { text: args[0], values: args[1] };
  }
  if (args.length !== 1 || typeof args[0] !== 'object' || args[0] === null) return undefined;
  const config = args[0] as Partial<CarriedStatement> & { name?: unknown; submit?: unknown };
  if (typeof config.text !== 'string' || !isParameters(config.values)) return undefined;
  if (config.name !== undefined || config.submit !== undefined) return undefined;
  const { text, values, rowMode, types } = config;
  return { text, values, ...(rowMode ? { rowMode } : {}), ...(types ? { types } : {}) };
}

function isParameters(values: unknown): values is unknown[] {
  return Array.isArray(values) && values.length > 0;
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
  onCaptured?: (readOnly: boolean) => void,
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
      config,
      (error, outcome) => {
        if (error) {
          if (!query.beginReported) notBegun(error);
          reject(error);
        } else {
          resolve(outcome!);
        }
      },
      () => begunNow(),
      onCaptured,
    );
    void client.query(query as unknown as pg.Query);
  });
  return { result, begun };
}
