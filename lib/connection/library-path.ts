import { type PoolClient, type QueryConfig, type QueryResult, type QueryResultRow } from 'pg';
import { queryWithDeadline, type StatementDeadline } from './deadline.js';
import { pinSearchPath, runSurrounded } from './session-state.js';

/**
 * The names a `search_path` setting lists, in order, read as PostgreSQL reads them (as
 * `SEARCH_PATH_SCHEMAS` does in SQL): split on the commas outside quotes; a quoted name as
 * written (`""` a quote), an unquoted one with its ASCII letters in lower case; `$user` (quoted
 * or not) the role the session logged in as (`sessionUser`: the backend's login role, never a `SET ROLE`'s
 * `current_user`); each cut to a name's 63 bytes. Empty entries are dropped.
 */
export function searchPathNames(setting: string, sessionUser: string): string[] {
  const names: string[] = [];
  for (const match of setting.matchAll(/\s*("(?:[^"]|"")*"|[^,]+)/g)) {
    const entry = match[1].trim();
    if (entry === '') continue;
    const item =
      entry.startsWith('"') && entry.endsWith('"') && entry.length >= 2
        ? entry.slice(1, -1).replace(/""/g, '"')
        : entry.replace(/[A-Z]/g, (letter) => letter.toLowerCase());
    names.push(truncateName(item === '$user' ? sessionUser : item));
  }
  return names;
}

/** A name cut to PostgreSQL's 63 bytes, never inside a character. */
function truncateName(name: string): string {
  if (Buffer.byteLength(name) <= 63) return name;
  let cut = '';
  for (const char of name) {
    if (Buffer.byteLength(cut + char) > 63) break;
    cut += char;
  }
  return cut;
}

/** Schemas kept in the pinned path whether or not the catalog lists them by that name. */
const ALWAYS_KEPT = new Set(['pg_temp', 'pg_catalog']);

/**
 * The search path the library's own statements run with (a pure decision): the session's
 * DEFAULT path (`reset_val` of `search_path`: the connection string's, the role's, the
 * database's or the server's, whatever a `SET` on the pooled connection changed since), with
 * `$user` the login role (read at the check), kept to the schemas that exist (`exists`), each
 * quoted: a text that resolves the same way whatever role or path a session has when the
 * library gets it. Quoted, a name is never folded again, nor taken for `$user`.
 */
export function resolvedLibraryPath(
  defaultPath: string,
  sessionUser: string,
  exists: (schema: string) => boolean,
): string {
  const seen = new Set<string>();
  const kept: string[] = [];
  for (const name of searchPathNames(defaultPath, sessionUser)) {
    if (seen.has(name)) continue;
    seen.add(name);
    if (ALWAYS_KEPT.has(name) || exists(name)) kept.push(quoteName(name));
  }
  return kept.join(', ');
}

/** A schema's name quoted for a `search_path` (`"` doubled), as `quote_ident` would always. */
export function quoteName(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

/**
 * Sends a statement of the library's own on `client` (`queryWithDeadline`), with the library's
 * search path (`path`, see `resolvedLibraryPath`) set for its transaction in the same round trip
 * (`pinSearchPath`): the one road for a statement the library sends on a connection taken for
 * it, so that none reaches the tables of a schema a session's path was left on. `path`
 * undefined: no start-up check has passed yet, the session's own path applies.
 */
export function libraryStatement<R extends QueryResultRow>(
  client: PoolClient,
  config: QueryConfig,
  timeoutMs: number,
  path: string | undefined,
  deadline: Omit<StatementDeadline<R>, 'send'> = {},
): Promise<QueryResult<R>> {
  return queryWithDeadline<R>(client, config, timeoutMs, {
    ...deadline,
    send:
      path === undefined
        ? undefined
        : () =>
            runSurrounded(client, config, undefined, {
              before: [pinSearchPath(path)],
            }) as Promise<QueryResult<R>>,
  });
}

/**
 * A simple query's text (statements joined by `;`, in one transaction of their own or the
 * one open) with the library's search path set first, for the rest of that transaction.
 */
export function pinnedText(text: string, path: string | undefined): string {
  return path === undefined ? text : `${pinSearchPath(path)}; ${text}`;
}
