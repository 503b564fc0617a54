import {
  answersAsked,
  type CancelKind,
  isCancelAskedForError,
  markAskedByApp,
} from './connection-errors.js';

/** A backend a statement asks PostgreSQL to cancel the statement of, or to end. */
export interface CancelAsked {
  kind: CancelKind;
  pid: number;
}

/**
 * `pg_cancel_backend(<pid>)` or `pg_terminate_backend(<pid>[, timeout])`, the pid a literal
 * or a parameter (`$1`, cast or not): the forms a driver's or a data layer's abort sends
 * (Kysely's `select pg_cancel_backend(123)`), and the one an app writes with a parameter.
 */
const ASK = /\bpg_(cancel|terminate)_backend\s*\(\s*(?:(\d+)|\$(\d+))\s*(?:::\s*\w+\s*)?[,)]/gi;

/**
 * The backends `text` asks PostgreSQL to cancel or end, by their pid (read from `values` for
 * a parameter). A pid computed in SQL (a subquery on `pg_stat_activity`) is not read: such a
 * statement picks backends by what they do, not the request's own by its pid.
 */
export function cancelsAskedIn(text: unknown, values: readonly unknown[] = []): CancelAsked[] {
  if (typeof text !== 'string' || !/_backend/i.test(text)) return [];
  const asked: CancelAsked[] = [];
  for (const [, kind, literal, parameter] of text.matchAll(ASK)) {
    const raw = literal ?? values[Number(parameter) - 1];
    // node-postgres sends a string or a BigInt parameter as its digits: the same pid.
    const pid =
      (typeof raw === 'string' && /^\d+$/.test(raw)) || typeof raw === 'bigint' ? Number(raw) : raw;
    if (typeof pid !== 'number' || !Number.isSafeInteger(pid) || pid <= 0) continue;
    asked.push({ kind: kind.toLowerCase() === 'cancel' ? 'cancel' : 'terminate', pid });
  }
  return asked;
}

/**
 * Connections whose backend the request's own code asked to cancel or end, which, and when
 * (on the count of `statementCalled`).
 */
const askedOf = new WeakMap<object, { kind: CancelKind; at: number }>();
let calls = 0;

/**
 * Notes that the code of the request holding `client` asked PostgreSQL to cancel its
 * statement or end its backend (`kind`): the errors that answer it there are then the app's
 * own doing (see `noteAnswer`). An end outlasts a cancel already noted.
 */
export function noteCancelAsked(client: object, kind: CancelKind): void {
  if (askedOf.get(client)?.kind !== 'terminate') askedOf.set(client, { kind, at: ++calls });
}

/** When a statement is called on a connection: what `noteAnswer` is told of it. */
export function statementCalled(): number {
  return ++calls;
}

/** Forgets what was asked of `client`'s backend: it goes back to the pool for other work. */
export function forgetCancelAsked(client: object): void {
  askedOf.delete(client);
}

/**
 * Notes how a statement on `client` ended (`error`: undefined, it succeeded): the answer to a
 * cancel its request's own code asked for (the statement it cancelled: once; a cancel ends one
 * statement) or to an end (every error after it: the connection is gone) is marked as the
 * app's own (`markAskedByApp`). A statement called after the cancel was asked (`calledAt`, see
 * `statementCalled`) that ends without its 57014 shows it landed while nothing ran, where
 * PostgreSQL drops it: an operator's or a deadline's cancel later in the request is no longer
 * taken for the app's.
 */
export function noteAnswer(client: object, error: unknown, calledAt?: number): void {
  const asked = askedOf.get(client);
  if (asked === undefined) return;
  if (error !== undefined && answersAsked(asked.kind, error)) {
    markAskedByApp(error);
    if (asked.kind === 'cancel') askedOf.delete(client);
  } else if (asked.kind === 'cancel' && calledAt !== undefined && calledAt > asked.at) {
    askedOf.delete(client);
  }
}

/**
 * Whether `error`, thrown by the request's code, is the answer `met` (a failure of one of its
 * statements that the app's own cancel or end answered: marked by `noteAnswer`) as a data
 * layer hands it on. Prisma does not keep node-postgres' error: it rebuilds it (see
 * `prismaCause`), so the mark on the driver's error is not on what reaches the library. Told
 * by what both answer (a 57014 of a user's cancel, a connection lost), never by the object.
 * Only while `met` still decides the request's transaction (its abort not ended by a `ROLLBACK
 * TO SAVEPOINT`): a later operator's cancel then meets a transaction already aborted (25P02).
 */
export function answersSameAsked(met: unknown, error: unknown): boolean {
  if (met === undefined || met === error || !isCancelAskedForError(met)) return false;
  return (['cancel', 'terminate'] as const).some(
    (kind) => answersAsked(kind, met) && answersAsked(kind, error),
  );
}
