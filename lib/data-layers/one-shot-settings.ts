import { localSettingsOf, setsIdentity, statementsOf } from '../transaction/sql/sql-text.js';

/**
 * What a text of several statements sets for the transaction (`SET LOCAL statement_timeout =
 * '200ms'; SELECT …`, `SET LOCAL ROLE reporter; SELECT …`), sent outside any nested transaction
 * (`pool.query()`, or a client of the pool with none open): node-postgres runs such a text in
 * one implicit transaction of its own, which ends what it set, so its code means it for that
 * text only. On the request's connection it would last to the request's end (its later writes
 * under its timeout, or as its role): it is put back after the text. A statement alone (`SET
 * LOCAL ROLE …` on its own) is not: it sets the request's transaction, as the docs say.
 */
export interface OneShotSettings {
  /** The settings it sets for the transaction (see `localSettingsOf`). */
  names: string[];
  /** It sets the role, session authorization or search path for the transaction. */
  identity: boolean;
}

/** See `OneShotSettings`; undefined for a statement alone, or a text that sets nothing. */
export function oneShotSettingsOf(
  text: unknown,
  values?: readonly unknown[],
): OneShotSettings | undefined {
  if (typeof text !== 'string') return undefined;
  const names = localSettingsOf(text, values);
  const identity = setsIdentity(text);
  if (names.length === 0 && !identity) return undefined;
  return statementsOf(text).length > 1 ? { names, identity } : undefined;
}
