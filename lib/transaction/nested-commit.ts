import pg from 'pg';
import { restoreSettings } from '../storage/session-state.js';
import { mayDefer } from './shadowed-built-ins.js';
import { commitEndsOf, localSettingsOf } from './sql-text.js';

/**
 * What a data layer's outermost nested transaction leaves that its own COMMIT would have ended
 * without the library, and that the savepoint's `RELEASE` standing for that COMMIT keeps: the
 * settings its code set for the transaction (`SET LOCAL`, `set_config(…, true)`), the
 * temporary tables it made `ON COMMIT DROP | DELETE ROWS`, the cursors it declared without
 * `WITH HOLD`. Noted statement by statement (`before`), ended after the `RELEASE` (`endingText`).
 * What it cannot end (its locks, a `SET CONSTRAINTS`) lasts to the request's COMMIT, as the
 * docs say.
 */
export class NestedCommit {
  /** The settings' values before its code set them (`READ_SETTINGS`; null: unset). */
  private readonly settingsBefore = new Map<string, string | null>();
  private readonly tempTables = new Map<string, 'drop' | 'delete'>();
  private readonly cursors = new Set<string>();

  /** Notes what `text` leaves; the settings it sets whose values are not read yet. */
  private note(text: unknown): string[] {
    const ends = commitEndsOf(text);
    for (const { name, action } of ends.tempTables) this.tempTables.set(name, action);
    for (const cursor of ends.cursors) this.cursors.add(cursor);
    return localSettingsOf(text).filter((name) => !this.settingsBefore.has(name));
  }

  /**
   * Before `text`, a statement of its code: notes what it leaves (`note`), and reads the
   * values of the settings it sets, once each, with `read` (`READ_SETTINGS` on the request's
   * connection: a round trip, only for such statements).
   */
  async before(
    text: unknown,
    read: (names: string[]) => Promise<readonly { name: string; value: string | null }[]>,
  ): Promise<void> {
    const names = this.note(text);
    if (names.length === 0) return;
    for (const { name, value } of await read(names)) this.settingsBefore.set(name, value);
  }

  /**
   * What ends them, sent after the `RELEASE` (statements joined by `;`). The temporary tables
   * go together, as PostgreSQL's COMMIT ends them (one `DROP … CASCADE`, one `TRUNCATE`: two
   * linked by a foreign key end without error); one its code already dropped is left alone.
   * Every cursor not `WITH HOLD` is closed, as a COMMIT closes them, whoever opened it (a
   * `DECLARE`, a PL/pgSQL function's refcursor): the request's own top level cannot declare
   * one without the library (outside a transaction block PostgreSQL refuses it), and a
   * stream of its code's own is refused before the commit.
   */
  endingText(sweep: boolean): string | undefined {
    const parts: string[] = [];
    if (this.settingsBefore.size > 0) parts.push(restoreSettings(this.settingsBefore));
    // The sweep where it rides in a round trip sent anyway (`sweep`), or where its code made
    // something it ends: a TypeORM save's own savepoint (no statement after its RELEASE
    // otherwise) pays no round trip for it.
    if (!sweep && this.tempTables.size === 0 && this.cursors.size === 0) {
      return parts.length > 0 ? parts.join('; ') : undefined;
    }
    const named = (action: 'drop' | 'delete') =>
      `ARRAY[${[...this.tempTables]
        .filter(([, what]) => what === action)
        .map(([name]) => pg.escapeLiteral(name))
        .join(', ')}]::text[]`;
    const existing = (action: 'drop' | 'delete') =>
      `(SELECT string_agg(format('pg_temp.%I', n), ', ') FROM unnest(${named(action)}) AS n ` +
      `WHERE to_regclass(format('pg_temp.%I', n)) IS NOT NULL)`;
    parts.push(
      'DO $idempotency$ DECLARE tables text; cursor_names text[]; cursor_name text; BEGIN ' +
        `tables := ${existing('drop')}; ` +
        "IF tables IS NOT NULL THEN EXECUTE 'DROP TABLE ' || tables || ' CASCADE'; END IF; " +
        `tables := ${existing('delete')}; ` +
        "IF tables IS NOT NULL THEN EXECUTE 'TRUNCATE ' || tables; END IF; " +
        // The names first: a FOR loop over the view would be a portal of its own in it.
        'SELECT array_agg(name) INTO cursor_names FROM pg_cursors WHERE NOT is_holdable ' +
        "AND name <> '' AND name NOT LIKE '<unnamed portal%'; " +
        'FOREACH cursor_name IN ARRAY coalesce(cursor_names, ARRAY[]::text[]) ' +
        "LOOP EXECUTE format('CLOSE %I', cursor_name); END LOOP; " +
        'END $idempotency$',
    );
    return parts.join('; ');
  }
}

/**
 * Checks, before the `RELEASE` standing for a nested transaction's COMMIT, the constraints
 * deferred to the commit (`DEFERRABLE INITIALLY DEFERRED`, `SET CONSTRAINTS … DEFERRED`), as
 * that COMMIT would: a violation fails the nested commit, where its code can catch it (and its
 * data layer then rolls back to the savepoint), rather than the request's COMMIT, where
 * nothing of the handler's could. Checked in a savepoint rolled back at once: the checks are
 * pending again and their mode as it was, so the request's COMMIT checks what comes after. It
 * checks what the request's own statements before the nested transaction deferred too (which
 * without the library their own commits would have checked). Undefined when the database had
 * nothing deferrable at start-up (`mayDefer`), unless `always` (the pool seam, where it rides
 * in the RELEASE's round trip at no cost of its own).
 */
export function deferredCheck(always = false): string | undefined {
  return always || mayDefer()
    ? 'SAVEPOINT idempotency_deferred_check; SET CONSTRAINTS ALL IMMEDIATE; ' +
        'ROLLBACK TO SAVEPOINT idempotency_deferred_check; ' +
        'RELEASE SAVEPOINT idempotency_deferred_check'
    : undefined;
}
