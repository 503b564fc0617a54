import pg from 'pg';
import { restoreSettings } from '../connection/session-state.js';
import { mayDefer } from '../transaction/sql/shadowed-built-ins.js';
import { commitEndsOf, localSettingsOf, sessionSettingsOf } from '../transaction/sql/sql-text.js';

/**
 * What a data layer's outermost nested transaction leaves that its own COMMIT would have ended
 * without the library, and that the savepoint's `RELEASE` standing for that COMMIT keeps: the
 * settings its code set for the transaction (`SET LOCAL`, `set_config(…, true)`), the
 * temporary tables it made `ON COMMIT DROP | DELETE ROWS`, the cursors it declared without
 * `WITH HOLD`. Noted statement by statement (`before`), ended after the `RELEASE` (`endingText`).
 * What it cannot end (its locks, a `SET CONSTRAINTS`) lasts to the request's COMMIT, as the
 * docs say. `sessionToo`: one begun beside another (see `LazyTransaction.besideCommits`),
 * which without the library runs on a connection of its own: the settings its code set for the
 * session (`SET app.actor = …`) are put back too, for the rest of the request (the value set
 * stays the connection's after it, as it would on that connection of its own).
 */
export class NestedCommit {
  constructor(private readonly sessionToo = false) {}

  /** The settings' values before its code set them (`READ_SETTINGS`; null: unset). */
  private readonly settingsBefore = new Map<string, string | null>();
  private readonly tempTables = new Map<string, 'drop' | 'delete'>();
  private readonly cursors = new Set<string>();

  /** Notes what `text` leaves; the settings it sets whose values are not read yet. */
  private note(text: unknown, values?: readonly unknown[]): string[] {
    const ends = commitEndsOf(text);
    for (const { name, action } of ends.tempTables) {
      // Made again without an ON COMMIT action (after a DROP): its COMMIT leaves it alone.
      if (action === 'keep') this.tempTables.delete(name);
      else this.tempTables.set(name, action);
    }
    for (const { from, to } of ends.renames ?? []) {
      const action = this.tempTables.get(from);
      if (action === undefined) continue;
      this.tempTables.delete(from);
      this.tempTables.set(to, action);
    }
    for (const cursor of ends.cursors) this.cursors.add(cursor);
    const session = this.sessionToo ? sessionSettingsOf(text, values) : [];
    return [...new Set([...localSettingsOf(text, values), ...session])].filter(
      (name) => !this.settingsBefore.has(name),
    );
  }

  /**
   * Before `text`, a statement of its code (sent with `values`): notes what it leaves
   * (`note`), and reads the
   * values of the settings it sets, once each, with `read` (`READ_SETTINGS` on the request's
   * connection: a round trip, only for such statements).
   */
  async before(
    text: unknown,
    values: readonly unknown[] | undefined,
    read: (names: string[]) => Promise<readonly { name: string; value: string | null }[]>,
  ): Promise<void> {
    const names = this.note(text, values);
    if (names.length === 0) return;
    for (const { name, value } of await read(names)) this.settingsBefore.set(name, value);
  }

  /**
   * What ends them, sent after the `RELEASE` and after the role, session authorization and
   * search path are put back (`restoreNestedState`, by the seam), statements joined by `;`:
   * the settings first (put back by the role the nested transaction began with, which may set
   * what a role its code narrowed to may not), then every cursor not `WITH HOLD` closed, as a
   * COMMIT closes them before it ends the tables (one left open over a temporary table would
   * keep it "in use": 55006), whoever opened it (a `DECLARE`, a PL/pgSQL function's
   * refcursor): the request's own top level cannot declare one without the library (outside a
   * transaction block PostgreSQL refuses it), and a stream of its code's own is refused
   * before the commit. Then the temporary tables, together, as PostgreSQL's COMMIT ends them
   * (one `DROP … CASCADE`, one `TRUNCATE`: two linked by a foreign key end without error),
   * one its code already dropped left alone. A COMMIT ends them whatever the role; here each is
   * ended by a role that may: the one put back, or the table's owner where that one may not
   * act as it (a table made under `SET LOCAL ROLE` by a `NOINHERIT` login), set for the
   * statement and put back after it.
   */
  endingText(sweep: boolean, insideOf?: string, beganAt?: string): string | undefined {
    const ownCursorsOnly = insideOf !== undefined;
    // When it began: as kept in the process where the seam read it (`beganAt`), which a
    // `RESET ALL` of its code's cannot reach, else from the setting it was kept in.
    const began =
      beganAt !== undefined
        ? pg.escapeLiteral(beganAt)
        : `current_setting('idempotency.${insideOf}_began')`;
    const parts: string[] = [];
    if (this.settingsBefore.size > 0) parts.push(restoreSettings(this.settingsBefore));
    // The sweep where it rides in a round trip sent anyway (`sweep`), or where its code made
    // something it ends: a TypeORM save's own savepoint (no statement after its RELEASE
    // otherwise) pays no round trip for it. Inside another nested transaction still open
    // (begun beside it; `insideOf`, its savepoint's kept-state name, `beganAt` when it began as
    // the seam read it back), only the cursors opened
    // since it began are closed (a DECLARE, or a function's own): the others may be that one's,
    // which its own COMMIT would not close.
    const sweeping = sweep;
    if (sweeping || this.tempTables.size > 0 || this.cursors.size > 0) {
      const end = (action: 'drop' | 'delete', command: (tables: string) => string) => {
        const names = [...this.tempTables]
          .filter(([, what]) => what === action)
          .map(([name]) => pg.escapeLiteral(name));
        if (names.length === 0) return '';
        return (
          'FOR owner_name, tables IN SELECT r.rolname, ' +
          "string_agg(format('pg_temp.%I', n), ', ') " +
          `FROM unnest(ARRAY[${names.join(', ')}]::text[]) AS n ` +
          "JOIN pg_class c ON c.oid = to_regclass(format('pg_temp.%I', n)) " +
          'JOIN pg_roles r ON r.oid = c.relowner GROUP BY r.rolname LOOP ' +
          "IF pg_has_role(owner_name, 'USAGE') THEN EXECUTE " +
          command('tables') +
          "; ELSE PERFORM set_config('role', owner_name, true); EXECUTE " +
          command('tables') +
          "; PERFORM set_config('role', kept_role, true); END IF; END LOOP; "
        );
      };
      parts.push(
        'DO $idempotency$ DECLARE cursor_names text[]; cursor_name text; owner_name text; ' +
          "tables text; kept_role text := current_setting('role'); BEGIN " +
          // The names first: a FOR loop over the view would be a portal of its own in it.
          'SELECT array_agg(name) INTO cursor_names FROM pg_cursors WHERE NOT is_holdable ' +
          "AND name <> '' AND name NOT LIKE '<unnamed portal%' " +
          (ownCursorsOnly ? `AND creation_time >= ${began}::timestamptz; ` : '; ') +
          'FOREACH cursor_name IN ARRAY coalesce(cursor_names, ARRAY[]::text[]) ' +
          "LOOP EXECUTE format('CLOSE %I', cursor_name); END LOOP; " +
          end('drop', (tables) => `'DROP TABLE ' || ${tables} || ' CASCADE'`) +
          end('delete', (tables) => `'TRUNCATE ' || ${tables}`) +
          'END $idempotency$',
      );
    }
    return parts.length > 0 ? parts.join('; ') : undefined;
  }
}

/**
 * Runs, before the `RELEASE` standing for a nested transaction's COMMIT, what was deferred to
 * that COMMIT (`DEFERRABLE INITIALLY DEFERRED` constraints and constraint triggers, and what
 * `SET CONSTRAINTS … DEFERRED` deferred), as that COMMIT would: a violation fails the nested
 * commit, where its code can catch it (and its data layer then rolls back to the savepoint),
 * rather than the request's COMMIT, where nothing of the handler's could; a deferred
 * trigger's effects (an audit row) are there for the code after it. What the request's own
 * statements before the nested transaction deferred runs too, as their own commits would have
 * run it without the library.
 *
 * Then each constraint must be back in its initial mode, as the next transaction would begin
 * without the library, and PostgreSQL has no statement for that: the initially deferred ones
 * are named in one `SET CONSTRAINTS … DEFERRED` (`deferredAgain`, after the role is put
 * back), read from the catalog, each name once (a partitioned table's copies share it). A name also held by a constraint that is not
 * initially deferred cannot be named without changing that one too: then the run is a trial,
 * in a subtransaction rolled back (`RAISE` caught), which leaves every mode as it was and the
 * deferred work to the request's COMMIT, with its effects (the limit the docs state). A
 * schema the role may not use is left out (naming it is refused, 42501; its constraints stay
 * immediate to the request's COMMIT). That costs the server a catalog read (well under a
 * millisecond), paid only where the database had something deferrable at start-up
 * (`mayDefer`); elsewhere nothing is checked (TypeORM: a round trip of its own), or, on the
 * pool seam (`always`, where the check rides in the RELEASE's round trip), one added later is
 * checked and stays immediate to the request's COMMIT.
 */
export function deferredCheck(always = false): string | undefined {
  if (mayDefer()) return RUN_DEFERRED_AS_COMMIT;
  return always ? RUN_DEFERRED : undefined;
}

/**
 * After the `RELEASE` and after the role the nested transaction began with is put back
 * (naming a schema is checked against the role: its code's `SET LOCAL ROLE` may not use one
 * the login may): the initially deferred constraints named `DEFERRED` again, where
 * `deferredCheck` ran them for real. Undefined where it names nothing (`mayDefer`).
 */
export function deferredAgain(): string | undefined {
  return mayDefer() ? DEFERRED_AGAIN : undefined;
}

const RUN_DEFERRED = 'SET CONSTRAINTS ALL IMMEDIATE';

/** Set (transaction-local) when the deferred work ran for real: `DEFERRED_AGAIN` then names. */
const AGAIN = 'idempotency.deferred_again';

const RUN_DEFERRED_AS_COMMIT =
  'DO $idempotency$ BEGIN ' +
  'IF NOT EXISTS (SELECT FROM pg_constraint c JOIN pg_constraint o ' +
  'ON o.connamespace = c.connamespace AND o.conname = c.conname ' +
  'WHERE c.condeferred AND NOT o.condeferred) ' +
  `THEN SET CONSTRAINTS ALL IMMEDIATE; PERFORM set_config('${AGAIN}', 'on', true); ` +
  // The trial: a violation is raised as it is; its own end is caught, and rolls back.
  "ELSE BEGIN SET CONSTRAINTS ALL IMMEDIATE; RAISE SQLSTATE 'IDMP1'; " +
  "EXCEPTION WHEN SQLSTATE 'IDMP1' THEN NULL; END; END IF; " +
  'END $idempotency$';

const DEFERRED_AGAIN =
  'DO $idempotency$ DECLARE deferred text; BEGIN ' +
  `IF current_setting('${AGAIN}', true) = 'on' THEN ` +
  `PERFORM set_config('${AGAIN}', '', true); ` +
  "SELECT string_agg(DISTINCT format('%I.%I', n.nspname, c.conname), ', ') INTO deferred " +
  'FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace WHERE c.condeferred ' +
  "AND (c.connamespace = pg_my_temp_schema() OR n.nspname !~ '^pg_(toast_)?temp_') " +
  "AND has_schema_privilege(c.connamespace, 'USAGE'); " +
  "IF deferred IS NOT NULL THEN EXECUTE 'SET CONSTRAINTS ' || deferred || ' DEFERRED'; END IF; " +
  'END IF; END $idempotency$';
