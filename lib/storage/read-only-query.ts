import pg, { type PoolClient, type QueryResult } from 'pg';

/** The part of node-postgres' protocol connection that a query writes to. */
interface ProtocolConnection {
  parse(config: { text: string }): void;
  bind(config: object): void;
  execute(config: { portal: string }): void;
}

/** A statement `readOnly` can carry: its text and parameters, with how its rows are read. */
interface ReadStatement {
  text: string;
  queryMode?: 'extended';
  values?: unknown[];
  rowMode?: string;
  types?: unknown;
}

type QueryClass = new (
  config: ReadStatement,
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
 * Makes the transaction of its round trip read only, ahead of the statement: in the extended
 * protocol the messages up to a Sync run in one implicit transaction, and the mode ends with
 * it. (`set_config`, not `SET TRANSACTION`: PostgreSQL warns of the latter outside a block.)
 */
const READ_ONLY = "SELECT set_config('transaction_read_only', 'on', true)";

/**
 * node-postgres' own query, behind `READ_ONLY` in the same round trip: whatever the statement
 * calls (a view's function, a cast's, a domain's check, an aggregate of the app's), it cannot
 * write (25006). The mode's own row and completion are not reported: the caller sees the
 * statement's result alone.
 */
class ReadOnlyQuery extends Query {
  private modeSet = false;

  prepare(connection: ProtocolConnection): void {
    connection.parse({ text: READ_ONLY });
    connection.bind({});
    connection.execute({ portal: '' });
    prepare.call(this, connection);
  }

  handleDataRow(message: unknown): void {
    if (this.modeSet) handleDataRow.call(this, message);
  }

  handleCommandComplete(message: unknown, connection: unknown): void {
    if (!this.modeSet) {
      this.modeSet = true;
      return;
    }
    handleCommandComplete.call(this, message, connection);
  }
}

/**
 * The statement of a query's arguments that `readOnly` can carry: a text with its parameters,
 * or a config object without a name (a named statement's parse state is kept per name), a
 * callback or a `submit` (a cursor); else undefined.
 */
export function readStatement(args: unknown[]): ReadStatement | undefined {
  // `(text)`, `(text, values)`, `(config)`, `(config, values)` (Drizzle's), where `values` may
  // be undefined (TypeORM's, without parameters); a callback last is not carried.
  if (args.length > 2 || (args.length === 2 && args[1] !== undefined && !Array.isArray(args[1]))) {
    return undefined;
  }
  const values = args[1] as unknown[] | undefined;
  if (typeof args[0] === 'string') return { text: args[0], ...(values ? { values } : {}) };
  if (typeof args[0] !== 'object' || args[0] === null) return undefined;
  const config = args[0] as ReadStatement & {
    name?: unknown;
    submit?: unknown;
    callback?: unknown;
  };
  if (typeof config.text !== 'string') return undefined;
  if (config.name !== undefined || config.submit !== undefined || config.callback !== undefined) {
    return undefined;
  }
  if (config.values !== undefined && !Array.isArray(config.values)) return undefined;
  const { text, rowMode, types } = config;
  const given = values ?? config.values;
  return {
    text,
    ...(given ? { values: given } : {}),
    ...(rowMode ? { rowMode } : {}),
    ...(types ? { types } : {}),
  };
}

/** Runs `statement` on `client` in a read-only transaction of its round trip. */
export function readOnly(client: PoolClient, statement: ReadStatement): Promise<QueryResult> {
  return new Promise<QueryResult>((resolve, reject) => {
    // The extended protocol, always: its messages up to the Sync are one implicit transaction
    // (a text without parameters would go as a simple query, and the mode ahead not at all).
    const config = { ...statement, queryMode: 'extended' as const };
    const query = new ReadOnlyQuery(config, undefined, (error, result) =>
      error ? reject(error) : resolve(result!),
    );
    (client.query as unknown as (query: object) => void)(query);
  });
}

/**
 * `client` as a data layer that sends its reads with `client.query(text, values)` (TypeORM)
 * meets it: every statement it can carry runs in a read-only transaction of its round trip.
 */
export function readingOnly(client: PoolClient): PoolClient {
  return new Proxy(client, {
    get(target, key) {
      const value: unknown = Reflect.get(target, key, target);
      if (key !== 'query') return typeof value === 'function' ? value.bind(target) : value;
      return (...args: unknown[]) => {
        const statement = readStatement(args);
        return statement
          ? readOnly(target, statement)
          : (target.query as (...a: unknown[]) => unknown)(...args);
      };
    },
  });
}
