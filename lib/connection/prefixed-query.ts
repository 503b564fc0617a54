import pg, { type PoolClient, type QueryResult } from 'pg';

/** The part of node-postgres' protocol connection that a query writes to. */
interface ProtocolConnection {
  parse(config: { text: string }): void;
  bind(config: object): void;
  execute(config: { portal: string }): void;
}

/** A statement as node-postgres' `Query` takes it: its text and parameters, how rows are read. */
export interface QueryStatement {
  text: string;
  values?: unknown[];
  rowMode?: string;
  types?: unknown;
  /** Results in binary, as asked for the query. */
  binary?: boolean;
  /** node-postgres' own per-query bound ('Query read timeout'), read off the query it runs. */
  query_timeout?: number;
}

/**
 * A statement sent in front of the caller's in the same round trip, unreported: its rows go to
 * `onRow`, its completion to `onComplete`, never to the caller.
 */
export interface Prefix {
  text: string;
  onRow?: (fields: unknown[]) => void;
  onComplete?: () => void;
}

type QueryClass = new (
  config: QueryStatement & { queryMode: 'extended' },
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
 * node-postgres' own query, with `prefixes` parsed, bound and executed in front of it before
 * the Sync that ends the round trip. Why this is safe: in the extended protocol the messages
 * up to a Sync run in one implicit transaction (a mode set in front holds for the statement),
 * and PostgreSQL skips every message up to the Sync after an error, so a prefix that fails
 * never lets the statement behind it run. The caller sees the statement's result alone.
 */
export class PrefixedQuery extends Query {
  /** How many prefixes completed: a failure after one may leave what it began. */
  completed = 0;

  constructor(
    private readonly prefixes: readonly Prefix[],
    statement: QueryStatement,
    callback: (error: Error | null, result?: QueryResult) => void,
  ) {
    // The extended protocol always: a text without parameters would go as a simple query,
    // and the prefixes not at all.
    super({ ...statement, queryMode: 'extended' }, undefined, callback);
    // node-postgres reads it off the submittable it is handed, not off a config.
    if (statement.query_timeout !== undefined) this.query_timeout = statement.query_timeout;
  }

  /** See `QueryStatement.query_timeout`. */
  query_timeout?: number;

  prepare(connection: ProtocolConnection): void {
    for (const { text } of this.prefixes) {
      connection.parse({ text });
      connection.bind({});
      connection.execute({ portal: '' });
    }
    prepare.call(this, connection);
  }

  handleDataRow(message: unknown): void {
    const prefix = this.prefixes[this.completed];
    if (prefix === undefined) handleDataRow.call(this, message);
    else prefix.onRow?.((message as { fields?: unknown[] }).fields ?? []);
  }

  handleCommandComplete(message: unknown, connection: unknown): void {
    const prefix = this.prefixes[this.completed];
    if (prefix === undefined) {
      handleCommandComplete.call(this, message, connection);
      return;
    }
    this.completed++;
    prefix.onComplete?.();
  }
}

/** Sends `query` on `client`, as node-postgres queues any query. */
export function send(client: PoolClient, query: PrefixedQuery): void {
  (client.query as unknown as (query: object) => void)(query);
}

/** Sends `prefixes` and `statement` on `client` in one round trip: the statement's result. */
export function sendPrefixed(
  client: PoolClient,
  prefixes: readonly Prefix[],
  statement: QueryStatement,
): Promise<QueryResult> {
  return new Promise<QueryResult>((resolve, reject) => {
    send(
      client,
      new PrefixedQuery(prefixes, statement, (error, result) =>
        error ? reject(error) : resolve(result!),
      ),
    );
  });
}

/**
 * The statement of a query's arguments that can go behind prefixes as node-postgres would
 * send it: a text with its parameters, or a config object without a name (node-postgres keeps
 * a named statement's parse state per name), a callback or a `submit` (a cursor); else
 * undefined.
 */
export function queryStatement(args: unknown[]): QueryStatement | undefined {
  // `(text)`, `(text, values)`, `(config)`, `(config, values)` (Drizzle's), where `values` may
  // be undefined (TypeORM's, without parameters); a callback last is not carried.
  if (args.length > 2 || (args.length === 2 && args[1] !== undefined && !Array.isArray(args[1]))) {
    return undefined;
  }
  const values = args[1] as unknown[] | undefined;
  if (typeof args[0] === 'string') return { text: args[0], ...(values ? { values } : {}) };
  if (typeof args[0] !== 'object' || args[0] === null) return undefined;
  const config = args[0] as QueryStatement & {
    name?: unknown;
    submit?: unknown;
    callback?: unknown;
  };
  if (typeof config.text !== 'string') return undefined;
  if (config.name !== undefined || config.submit !== undefined || config.callback !== undefined) {
    return undefined;
  }
  if (config.values !== undefined && !Array.isArray(config.values)) return undefined;
  const { text, rowMode, types, binary, query_timeout } = config;
  // node-postgres takes the values argument over the config's.
  const given = values ?? config.values;
  return {
    text,
    ...(given ? { values: given } : {}),
    ...(rowMode ? { rowMode } : {}),
    ...(types ? { types } : {}),
    ...(binary ? { binary } : {}),
    ...(query_timeout ? { query_timeout } : {}),
  };
}

/**
 * The statement of a query's arguments as a read run apart sends it (see `readApart` of the
 * pool seam): as `queryStatement`, and a named one (node-postgres' `{ name, text, values }`,
 * Drizzle's `.prepare('x')`, Prisma's `statementNameGenerator`) without its name. The name
 * only keeps the statement parsed on the connection that ran it; the connection apart runs it
 * once, unnamed, behind the read-only prefix (a named statement's parse state is node-postgres'
 * per connection, and would be marked by the prefix's completion: see `SurroundedQuery`). The
 * same text and values read the same rows. Without it, a named read began the request's
 * transaction, and the phase or the isolation level asked after it was refused (adversary 105).
 */
export function apartStatement(args: unknown[]): QueryStatement | undefined {
  const [config, ...rest] = args;
  if (!isPlainNamedConfig(config)) return queryStatement(args);
  const { name: _name, ...unnamed } = config;
  return queryStatement([unnamed, ...rest]);
}

/**
 * A config object whose name alone may be dropped: a plain object (a literal, or made with a
 * null prototype) without a `submit`. A spread keeps only own properties, so one of a class
 * (a `pg.Query`, which has its own `name`, even undefined, and `submit` on its prototype)
 * would lose what makes it not a plain statement, and be sent as one.
 */
function isPlainNamedConfig(config: unknown): config is { name?: unknown } {
  if (typeof config !== 'object' || config === null || !('name' in config)) return false;
  const prototype = Object.getPrototypeOf(config) as unknown;
  return (prototype === Object.prototype || prototype === null) && !('submit' in config);
}
