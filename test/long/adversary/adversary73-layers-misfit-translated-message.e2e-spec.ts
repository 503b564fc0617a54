/**
 * Adversary 73: on a PostgreSQL server whose messages are not in English (`lc_messages` set
 * at initdb from a German, French, Spanish, Japanese or Russian locale: PostgreSQL ships 12
 * translations of its messages, and Debian's postgresql-15 installs them), a real pooler
 * misfit (a transaction-mode pooler the start-up probe did not recognise, with the default
 * `pooler`) is no longer told: no `store_misconfigured`, no ERROR log telling the operator to
 * set `pooler: 'transaction'`; the failure is answered as any other store failure.
 *
 *   { code: '26000', message: 'vorbereitete Anweisung »idempotency_claim_v5« existiert nicht' }
 *   { code: '42P05', message: "l'instruction préparée « idempotency_claim_v5 » existe déjà" }
 *
 * Why: round 72's fix (commit 33ab35d, lib/connection/pooler-misfit.ts) reads "the library's
 * own statements" from PostgreSQL's message TEXT, `LIBRARY_STATEMENT =
 * /^prepared statement "idempotency_/`, which is the English wording only (the SQLSTATE is
 * the only part of the error that does not depend on `lc_messages`). Before it, the SQLSTATE
 * alone was read, and these were told.
 *
 * Expected (docs/reference/problems.md): "the database connection cannot keep the library's
 * prepared statements (a pooler in transaction mode with `pooler: 'session'`, or one the
 * start-up probe did not recognise: SQLSTATE 26000 or 42P05) | 500 | ... `{"code":
 * "store_misconfigured", ...}`; ... the log says `Set pooler: 'transaction' in
 * IdempotencyModule.forRoot()`". Nothing there depends on the server's language.
 *
 * The messages are PostgreSQL 15's own translations, read from
 * /usr/share/locale/<lang>/LC_MESSAGES/postgres-15.mo on this machine (`prepared statement
 * "%s" does not exist` / `already exists`); this machine has no de_DE/fr_FR OS locale to set
 * `lc_messages` to, so the error is given to `explainPoolerMisfit` as node-postgres hands it.
 *
 * Control: the English message of the same statement is told (the log's advice).
 *
 * Severity: low (a misconfiguration's diagnosis lost on non-English servers; the request
 * still fails without committing; the operator gets no pointer to `pooler: 'transaction'`).
 *
 * Fails now: each translated row: 'Expected: StringContaining "Set pooler: ...", Received:
 * undefined' (the English control passes).
 *
 * Fixed: the library's statement is told by its name anywhere in the message
 * (`idempotency_…_v<n>`, lib/connection/pooler-misfit.ts), whatever the language.
 */
import { explainPoolerMisfit } from '../../../lib/connection/pooler-misfit.js';

const ADVICE = "Set pooler: 'transaction' in IdempotencyModule.forRoot()";

describe('adversary 73: a pooler misfit on a server whose messages are translated', () => {
  it('control: the English message is told', () => {
    expect(
      explainPoolerMisfit({
        code: '26000',
        message: 'prepared statement "idempotency_claim_v5" does not exist',
      }),
    ).toEqual(expect.stringContaining(ADVICE));
  });

  it.each([
    ['de', '26000', 'vorbereitete Anweisung »idempotency_claim_v5« existiert nicht'],
    ['de', '42P05', 'vorbereitete Anweisung »idempotency_claim_v5« existiert bereits'],
    ['fr', '26000', "l'instruction préparée « idempotency_claim_v5 » n'existe pas"],
    ['es', '42P05', 'la sentencia preparada «idempotency_claim_v5» ya existe'],
    ['ru', '26000', 'подготовленный оператор "idempotency_claim_v5" не существует'],
  ])('lc_messages %s, %s: told as a pooler misfit', (_lang, code, message) => {
    expect(explainPoolerMisfit({ code, message })).toEqual(expect.stringContaining(ADVICE));
  });
});
