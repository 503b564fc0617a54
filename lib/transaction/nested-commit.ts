import pg from 'pg';
import { restoreSettings } from '../storage/session-state.js';
import { mayDefer } from './shadowed-built-ins.js';
import { commitEndsOf, localSettingsOf } from './sql-text.js';

/**
 * What a data layer's outermost nested transaction leaves that its own COMMIT would have ended
 * without the library, and that the savepoint's `RELEASE` standing for that COMMIT keeps: the
 * settings its code set for the transaction (`SET LOCAL`, `set_config(…, true)`), the
 * temporary tables it made `ON COMMIT DROP | DELETE ROWS`, the cursors it declared without
 * `WITH HOLD`. Noted statement by statement (`note`), ended after the `RELEASE` (`endingText`).
 * What it cannot end (its locks, a `SET CONSTRAINTS`) lasts to the request's COMMIT, as the
 * docs say.
 */
export class NestedCommit {
  /** The settings' values before its code set them (`READ_SETTINGS`; null: unset). */
  private readonly settingsBefore = new Map<string, string | null>();
  private readonly tempTables = new Map<string, 'drop' | 'delete'>();
  private readonly cursors = new Set<string>();

  /**
   * Notes what `text`, a statement of its code, leaves; returns the settings it sets whose
   * values before must be read first (`keep`), once each.
   */
  note(text: unknown): string[] {
    const ends = commitEndsOf(text);
    for (const { name, action } of ends.tempTables) this.tempTables.set(name, action);
    for (const cursor of ends.cursors) this.cursors.add(cursor);
    return localSettingsOf(text).filter((name) => !this.settingsBefore.has(name));
  }

  /** The values `READ_SETTINGS` read for the names `note` returned. */
  keep(rows: readonly { name: string; value: string | null }[]): void {
    for (const { name, value } of rows) this.settingsBefore.set(name, value);
  }

  /**
   * What ends them, sent after the `RELEASE` (statements joined by `;`), or undefined when
   * there is nothing. A table or cursor its code already dropped or closed is left alone.
   */
  endingText(): string | undefined {
    const parts: string[] = [];
    if (this.settingsBefore.size > 0) parts.push(restoreSettings(this.settingsBefore));
    for (const [name, action] of this.tempTables) {
      if (action === 'drop')
        parts.push(`DROP TABLE IF EXISTS pg_temp.${pg.escapeIdentifier(name)}`);
    }
    const body = [
      ...[...this.tempTables]
        .filter(([, action]) => action === 'delete')
        .map(
          ([name]) =>
            `IF to_regclass(${pg.escapeLiteral(`pg_temp.${pg.escapeIdentifier(name)}`)}) IS NOT NULL ` +
            `THEN EXECUTE ${pg.escapeLiteral(`TRUNCATE pg_temp.${pg.escapeIdentifier(name)}`)}; END IF;`,
        ),
      ...[...this.cursors].map(
        (name) =>
          `IF EXISTS (SELECT 1 FROM pg_cursors WHERE name = ${pg.escapeLiteral(name)}) ` +
          `THEN EXECUTE ${pg.escapeLiteral(`CLOSE ${pg.escapeIdentifier(name)}`)}; END IF;`,
      ),
    ];
    if (body.length > 0) parts.push(`DO $idempotency$ BEGIN ${body.join(' ')} END $idempotency$`);
    return parts.length > 0 ? parts.join('; ') : undefined;
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
 * without the library their own commits would have checked). Undefined when the database has
 * nothing deferrable (`mayDefer`).
 */
export function deferredCheck(): string | undefined {
  return mayDefer()
    ? 'SAVEPOINT idempotency_deferred_check; SET CONSTRAINTS ALL IMMEDIATE; ' +
        'ROLLBACK TO SAVEPOINT idempotency_deferred_check; ' +
        'RELEASE SAVEPOINT idempotency_deferred_check'
    : undefined;
}
