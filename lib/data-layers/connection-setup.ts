import { nodeOf, type ParsedStatement, tokensOf } from '../transaction/sql/sql-parse.js';
import { statementsOf } from '../transaction/sql/sql-text.js';

/** What a data layer's hook sets on each new connection, that may last the request instead. */
const SETUP_SETTINGS = new Set(['search_path', 'role']);

/**
 * A data layer's setup of a fresh view of the request's connection, with the search path or
 * the role it sets for the session (`SET search_path TO shop, public`, `SET ROLE shop_app`)
 * made the request's transaction's own (`SET LOCAL …`): undefined for a text that sets neither.
 * A data layer sets up each connection it has not seen before (Kysely's `onCreateConnection`,
 * run once per client object), and every view is new to it: the session setting would outlive
 * the request on the pooled connection (and is refused), where for the request's transaction
 * it is what its statements run with, as on a connection of its own. A hook may set several
 * things, in one text or one per query (see `isSessionSetup`): each statement of a text of
 * SETs is read, the others (`SET TIME ZONE 'UTC'`) sent as they are. The library's own
 * statements put back the search path and role the transaction began with, so they are not
 * moved by it. It is the request's transaction's own by design: sent without the rule that puts
 * back what a text of several statements sets (see `OneShotSettings`).
 */
export function setupAsLocal(text: unknown, values: unknown): string | undefined {
  const statements = sessionSetsOf(text, values);
  if (!statements?.some(movable)) return undefined;
  // Each statement as the parser cut it (up to its semicolon), ended by a newline before the
  // semicolon: a line comment ending one (`SET search_path TO shop -- tenant first`) ends
  // there, not swallowing the semicolon and the next SET.
  return statements
    .map((statement) => (movable(statement) ? asLocal(statement.text) : statement.text))
    .join('\n; ');
}

/**
 * A session SET's text made `SET LOCAL`: its `SET` (and `SESSION`) replaced, found by the lexer,
 * so that a comment before or between them (`/* tenant *\/ SET search_path …`, as a hook may
 * write it) is read as PostgreSQL reads it: as nothing.
 */
function asLocal(text: string): string {
  const tokens = tokensOf(text) ?? [];
  const after = tokens[/^session$/i.test(tokens[1]?.text ?? '') ? 2 : 1];
  if (after === undefined) return text;
  const bytes = Buffer.from(text, 'utf8');
  return `SET LOCAL ${bytes.subarray(after.start).toString('utf8')}`;
}

/**
 * The text is a data layer's setup as far as it goes: every statement of it sets something
 * for the session (`SET …`, not `SET LOCAL`), with no values. A view is fresh (its setup may
 * come) until its first other text: a hook that sets the search path and then the role, one
 * query each, is set up by both (see `PoolTransaction.onView`).
 */
export function isSessionSetup(text: unknown, values: unknown): boolean {
  return sessionSetsOf(text, values) !== undefined;
}

function sessionSetsOf(text: unknown, values: unknown): ParsedStatement[] | undefined {
  // A SET may come after a comment (`-- the tenant schema first`): the parser decides.
  if (typeof text !== 'string' || !/^\s*(set\b|\/\*|--)/i.test(text)) return undefined;
  if (Array.isArray(values) ? values.length > 0 : values !== undefined) return undefined;
  const statements = statementsOf(text);
  if (statements.length === 0) return undefined;
  return statements.every((statement) => setOf(statement)?.local === false)
    ? statements
    : undefined;
}

function setOf(statement: ParsedStatement) {
  const [type, body] = nodeOf(statement.node) ?? [];
  if (type !== 'VariableSetStmt') return undefined;
  const { kind, name, is_local: local } = body as { kind: string; name: string; is_local?: true };
  return { kind, name, local: local === true };
}

/** A session SET of the search path or the role to a value (not `DEFAULT`, not `RESET`). */
function movable(statement: ParsedStatement): boolean {
  const set = setOf(statement);
  return set !== undefined && set.kind === 'VAR_SET_VALUE' && SETUP_SETTINGS.has(set.name);
}
