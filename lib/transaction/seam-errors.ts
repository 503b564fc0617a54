/**
 * Thrown to code that tries to start or end a transaction on the request's connection by
 * itself (`COMMIT`, `ROLLBACK`, `BEGIN`… as raw SQL, or a query runner's `commitTransaction()`
 * or `rollbackTransaction()` with no transaction of its own open). The request's transaction
 * is not ended: what follows would otherwise commit on its own, outside it. The request is
 * marked aborted, so that a handler that catches this and goes on answers 500
 * `transaction_aborted` with nothing committed, as after any failed statement it swallowed.
 */
export class TransactionControlRefusedError extends Error {
  constructor(readonly statement: string) {
    super(
      `${statement} refused: the idempotent request's transaction commits with its stored ` +
        'response, and code in it must not end it. Use a nested transaction ' +
        '(manager.transaction() or a query runner’s startTransaction() before its commit or ' +
        'rollback on TypeORM; $transaction() on Prisma; transaction() on Drizzle or Kysely), ' +
        'which is a savepoint, or run the work outside the request with ' +
        'IdempotentTransaction.outside().',
    );
    this.name = 'TransactionControlRefusedError';
  }
}

/**
 * The request's transaction can only roll back: a data layer's nested transaction rolled back
 * with a statement inside it that was not its own, sent beside it while it was open (through
 * the pool: `db` instead of `trx` inside a transaction's callback, or work running beside
 * it; or on another connection of the pool). On the request's one connection that statement
 * ran inside the nested transaction and rolled back with it, where without the library it
 * would have committed on a connection of its own; the request must not answer as if it had.
 */
export class StatementBesideNestedTransactionError extends TransactionControlRefusedError {
  /**
   * `identity`: refused as it was sent, beside a nested transaction that set its role;
   * `'read-only'`: beside one begun READ ONLY; `'settings'`: beside one that set a setting
   * for the transaction; `'sets-beside'`: a statement that sets the role, search path or a
   * setting, sent beside one.
   */
  constructor(identity: boolean | 'read-only' | 'settings' | 'sets-beside' = false) {
    super(
      identity === 'sets-beside'
        ? 'a statement setting the role, search path or a setting beside a nested transaction'
        : identity === 'read-only'
          ? 'a statement beside a nested transaction begun READ ONLY'
          : identity === 'settings'
            ? 'a statement beside a nested transaction that set a setting for itself'
            : identity
              ? 'a statement beside a nested transaction that set its role or search path'
              : 'a rollback of a nested transaction holding a statement not its own',
    );
    this.message =
      (identity === 'sets-beside'
        ? 'A statement that sets the role, session authorization, search path or a setting ' +
          'for the transaction (SET LOCAL, set_config(…, true)) was sent beside an open nested ' +
          'transaction (through the pool, or on another of its connections): on the idempotent ' +
          'request’s one connection it would set it inside that transaction, whose end puts ' +
          'back what it began with, where without the library it sets its own connection’s.'
        : identity === 'read-only'
          ? 'A statement was sent beside a nested transaction begun READ ONLY (through the ' +
            'pool, or on another of its connections): on the idempotent request’s one connection ' +
            'it would run inside it, in its read-only mode, where its write is refused.'
          : identity === 'settings'
            ? 'A statement was sent beside a nested transaction (through the pool, or on another ' +
              'of its connections) after that transaction set a setting for itself (SET LOCAL, ' +
              'set_config(…, true)): on the idempotent request’s one connection it would run ' +
              'inside it, under that setting (its statement_timeout, its tenant for row-level ' +
              'security), where without the library it runs with its own.'
            : identity
              ? 'A statement was sent beside a nested transaction (through the pool, or on another ' +
                'of its connections) after that transaction set its role, session authorization or ' +
                'search path (SET LOCAL ROLE): on the idempotent request’s one connection it would ' +
                'run inside it, as that role, where row-level security may hide rows from it.'
              : 'A nested transaction rolled back with a statement inside it that was sent beside ' +
                'it (through the pool, or on another of its connections) while it was open: on the ' +
                'idempotent request’s one connection that statement ran inside it, and rolled back ' +
                'with it.') +
      ' The request rolls back. Send the statement through the nested transaction’s own ' +
      'client (trx, tx) if it belongs to it, or once it has ended; or run it outside the ' +
      'request with IdempotentTransaction.outside().';
    this.name = 'StatementBesideNestedTransactionError';
  }
}

/**
 * The request's transaction was to commit while a nested transaction its code began was still
 * open: work the handler did not await (`dataSource.transaction()`, `db.transaction()`, a
 * save) before it answered. Committed then, the nested transaction's statements so far would
 * commit with the answer and the rest of it fail after: half of what its code meant to be all
 * or nothing. Without the library it would have finished on a connection of its own. The
 * request rolls back instead (500 `transaction_aborted`).
 */
export class NestedTransactionOpenAtCommitError extends TransactionControlRefusedError {
  constructor() {
    super('the answer while a nested transaction was still open');
    this.message =
      'The handler answered while a nested transaction its code began (dataSource.transaction(), ' +
      'db.transaction(), a save) was still open: committed now, it would keep half of its ' +
      'work. The idempotent request rolls back. Await database work before answering, or run ' +
      'work that is not the request’s in IdempotentTransaction.outside(). A client kept ' +
      'across requests (a batch: BEGIN in one request, COMMIT in a later one) is such work: ' +
      'its transaction cannot outlive the request it was taken in; take that client with ' +
      'pool.connect() in IdempotentTransaction.outside().';
    this.name = 'NestedTransactionOpenAtCommitError';
  }
}

/**
 * A nested transaction's start, commit or rollback waited longer than the module's
 * `timeoutMs` for another's, whose TypeORM transaction subscriber (`beforeTransactionStart`,
 * `beforeTransactionCommit`…) was still running: most often a subscriber awaiting work that
 * waits in turn behind it, which would never end (a hang that holds the key). Ends and starts
 * the library can decide on arrival never wait; this bounds the rest. The request rolls back
 * (500 `transaction_aborted`).
 */
export class NestedTurnTimeoutError extends TransactionControlRefusedError {
  constructor(waitedMs: number) {
    super('a nested transaction’s start, commit or rollback that waited too long for its turn');
    this.message =
      `A nested transaction's start, commit or rollback waited more than ${waitedMs} ms for ` +
      'another’s, whose TypeORM transaction subscriber was still running: most often a ' +
      'subscriber awaiting a transaction of the same request that waits for it. The idempotent ' +
      'request rolls back. Do not await another transaction of the request from a transaction ' +
      'subscriber: await it in the handler before the next begins, or run it in ' +
      'IdempotentTransaction.outside().';
    this.name = 'NestedTurnTimeoutError';
  }
}

/**
 * A TypeORM transaction subscriber (`beforeTransactionStart`, `afterTransactionStart`,
 * `beforeTransactionCommit`, `beforeTransactionRollback`) of a nested transaction started
 * another transaction of the request and returned, or awaited other work, while that one was
 * still open (or starting). TypeORM sends the step it ran before (SAVEPOINT, RELEASE or
 * ROLLBACK TO) with the savepoint name of the runner's depth then, which the other raised: it
 * would end the wrong savepoint (a transaction told it rolled back kept, or 3B001). Refused
 * before that step; the request can then only roll back (500 `subscriber_transaction_open`).
 * One a `beforeTransactionCommit` subscriber starts without awaiting anything after it waits
 * for the RELEASE instead (see `CommitHold`).
 */
export class SubscriberTransactionOpenError extends TransactionControlRefusedError {
  constructor(readonly event: string) {
    super(`a transaction left open by a ${event} subscriber`);
    this.message =
      `A TypeORM ${event} subscriber started a transaction of the idempotent request and ` +
      'returned, or awaited other work, while it was still open: on the request’s one ' +
      'connection the step the subscriber ran before would have ended that transaction’s ' +
      'savepoint instead of its own. The request rolls back. Await the transaction in the ' +
      'subscriber before anything else, or run it in IdempotentTransaction.outside().';
    this.name = 'SubscriberTransactionOpenError';
  }
}

/**
 * A statement (or a second cursor) sent while a cursor is open on the request's connection:
 * Kysely's `stream()` with a write per streamed row, pg-cursor or pg-query-stream on a client
 * of the pool with a write beside it. Without the library the write takes another connection
 * of the pool; on the request's one connection it would queue behind the cursor, whose reader
 * awaits the write: a hang that holds the key, renewed by the heartbeat. Refused at once; the
 * request can then only roll back (answered 500 `cursor_open`).
 */
export class CursorOpenRefusedError extends TransactionControlRefusedError {
  constructor() {
    super('a statement sent while a cursor is open on the request’s connection');
    this.message =
      'A statement was sent while a cursor (a stream: Kysely’s stream(), pg-cursor, ' +
      'pg-query-stream) was open on the idempotent request’s connection. Every statement of ' +
      'the request runs on that one connection, where this one would wait for the cursor to ' +
      'end, and the cursor’s reader for it: forever. The request rolls back. Read the stream ' +
      'to its end (or close it) before writing, or read the rows with execute() (in pages if ' +
      'they are many); a stream that is not the request’s own can run outside it, in ' +
      'IdempotentTransaction.outside(), on a connection of its own.';
    this.name = 'CursorOpenRefusedError';
  }
}

/**
 * A statement of the request's own sent while one of its atomic phases runs
 * (`Promise.all([phases.run(...), repository.save(...)])`): it would begin the request's
 * transaction, which lasts to the request's answer, and hold its row locks there; a phase
 * touching the same rows would wait on it, and the handler on the phase: forever, the key
 * held. Refused at once; the request can then only roll back (answered 500
 * `statement_beside_phase`, nothing stored: the phases' committed work stays, and a retry
 * resumes after it).
 */
export class StatementBesidePhaseRefusedError extends TransactionControlRefusedError {
  constructor() {
    super('a statement of the request sent while one of its phases runs');
    this.message =
      'A statement of the idempotent request (a write, or a read that would begin the ' +
      'request’s transaction: a locking read, a read of a view, a WITH, any read above READ ' +
      'COMMITTED) was sent while one of its atomic phases ' +
      '(phases.run()) was running. It would begin the request’s transaction, which lasts until ' +
      'the request answers, and hold its locks there: a phase touching the same rows would ' +
      'wait on it, and the handler on the phase, forever. The request rolls back (what its ' +
      'phases committed stays). Await the phase before writing outside it (or write in ' +
      'finish()), or put the write inside the phase.';
    this.name = 'StatementBesidePhaseRefusedError';
  }
}

/**
 * A text that makes the current transaction read only (`SET TRANSACTION READ ONLY`,
 * `transaction_read_only` set or `set_config`'d) together with other statements, sent outside
 * any transaction of the handler's own. Without the library that text runs in a transaction of
 * its own, which ends with it; in the request's, the mode would last to its end, and the
 * library could not store the answer (every try would fail). Such a statement sent alone is
 * sent apart, as without the library, where it does nothing; inside a nested transaction it
 * ends with the savepoint. The request rolls back.
 */
export class ReadOnlyTransactionRefusedError extends TransactionControlRefusedError {
  constructor() {
    super('a read-only transaction mode with other statements');
    this.message =
      'A text that makes the transaction read only (SET TRANSACTION READ ONLY, ' +
      'transaction_read_only) with other statements in it was sent outside any transaction ' +
      'of the handler’s own: in the idempotent request’s transaction, the mode would last ' +
      'until its COMMIT, and the answer could not be stored. The request rolls back. Open a ' +
      'transaction for the read-only work (manager.transaction(), db.transaction(), ' +
      '$transaction()), where the mode ends with it, or run it outside the request with ' +
      'IdempotentTransaction.outside().';
    this.name = 'ReadOnlyTransactionRefusedError';
  }
}

/**
 * A text that mixes `LISTEN` or `UNLISTEN` with other statements, sent on a client of the pool
 * inside an idempotent request. Listening is the session's: the library sends a text of
 * `LISTEN`s on a connection of its own, whose notifications the client hears while the
 * request runs; the other statements belong in the request's transaction. One text cannot go
 * to both, and sent on the request's connection its `LISTEN` would be heard only after the
 * answer. Refused before anything of it is sent.
 */
export class ListenAmongStatementsRefusedError extends TransactionControlRefusedError {
  constructor() {
    super('a LISTEN or UNLISTEN among other statements');
    this.message =
      'A text with LISTEN or UNLISTEN among other statements was refused on a client of the ' +
      'pool in an idempotent request: its LISTENs run on a connection of their own (heard ' +
      'while the request runs), its other statements in the request’s transaction, and one ' +
      'text cannot go to both. Nothing of it was sent. Send the LISTENs in a text of their ' +
      'own (one or several), and the other statements apart.';
    this.name = 'ListenAmongStatementsRefusedError';
  }
}

/**
 * A text the library's SQL reader (PostgreSQL 18's parser) refuses, that may hide what it must
 * see before sending: several statements, or one that starts or ends a transaction, sets a
 * setting, or calls `set_config` or an advisory lock. An older server may run it (a name
 * PostgreSQL 16 and later reserve, such as `system_user`), and a `COMMIT` in it would end the
 * request's transaction. The request rolls back.
 */
export class UnreadableStatementRefusedError extends TransactionControlRefusedError {
  constructor(readonly parserMessage: string) {
    super('a statement the library cannot read');
    this.message =
      `A statement the library could not read was refused (PostgreSQL’s parser: ` +
      `${parserMessage}). It holds several statements, or a transaction command, a SET, ` +
      'set_config or an advisory lock, which the library must see before an idempotent ' +
      'request’s statement is sent. The request rolls back. If the server runs it, send its ' +
      'statements one at a time, or quote the name the parser stops at (one that newer ' +
      'PostgreSQL reserves, such as "system_user").';
    this.name = 'UnreadableStatementRefusedError';
  }
}

/**
 * A TypeORM save (or remove) failed inside a transaction it did not open: another save's own,
 * or a nested transaction of other code that it ran beside or within through another manager
 * (an injected repository inside `dataSource.transaction()`). On the request's one connection
 * it ran inside that one (without the library it would have had a connection and transaction
 * of its own), and nothing can roll back its rows alone. The request rolls back (500
 * `transaction_aborted`), rather than keep the rows of a save its code was told had failed.
 */
export class ConcurrentSaveFailedError extends TransactionControlRefusedError {
  constructor() {
    super('a save that failed inside a transaction it did not open');
    this.message =
      'A save failed inside a transaction it did not open: another save’s (Promise.all of ' +
      'saves), or a nested transaction it ran beside or within through another manager. On ' +
      'the idempotent request’s one connection it ran inside that one, which cannot roll it ' +
      'back alone. The request rolls back. Await each save before the next where one may ' +
      'fail (for…of instead of Promise.all), and inside dataSource.transaction() save ' +
      'through the manager it hands you.';
    this.name = 'ConcurrentSaveFailedError';
  }
}

/**
 * A session-level advisory lock function (`pg_advisory_lock`, `pg_advisory_unlock`, their
 * `_shared` and `try_` variants, `pg_advisory_unlock_all`) sent in the request's transaction,
 * refused before it is sent. In the request, the handler's statements run in a transaction
 * that commits only after the handler returned: the unlock would release the lock before the
 * COMMIT, and a second request would take it and read the slot the first is still writing
 * (five concurrent bookings of one slot left two rows). A lock taken and not released would
 * stay with the pooled connection after the request. A transaction-level lock does what the
 * recipe means, released by the request's own COMMIT or ROLLBACK. The request rolls back.
 */
export class SessionAdvisoryLockRefusedError extends TransactionControlRefusedError {
  constructor(readonly lockFunction: string) {
    super(lockFunction);
    this.message =
      `${lockFunction} refused: a session-level advisory lock in an idempotent request is ` +
      'released by its unlock before the request’s COMMIT (another request then takes it ' +
      'while this one’s writes are not yet visible), or is kept by the pooled connection after ' +
      'the request. Use pg_advisory_xact_lock (or pg_try_advisory_xact_lock, and their ' +
      '_shared variants): the request’s COMMIT or ROLLBACK releases it, and no unlock is ' +
      'needed. The request rolls back.';
    this.name = 'SessionAdvisoryLockRefusedError';
  }
}

/**
 * A session-level setting of the role, the session authorization or the search path (`SET
 * ROLE`, `SET SESSION AUTHORIZATION`, `SET search_path`, not `SET LOCAL`; `set_config('role'
 * | 'search_path', …, false)`) sent in the request's transaction, refused before it is sent.
 * Committed with the request, it would stay with the pooled connection after it: every later
 * request on that connection would run as it, and the library's own statements there (run
 * with the role and search path its transaction began with) would fail as if the grants were
 * missing. `SET LOCAL` and `set_config(…, true)` end with the request's COMMIT or ROLLBACK.
 * The request rolls back.
 */
export class SessionSettingRefusedError extends TransactionControlRefusedError {
  constructor(readonly setting: string) {
    super(setting);
    this.message = `${setting} refused: ${sessionRefusalReason(setting)} The request rolls back.`;
    this.name = 'SessionSettingRefusedError';
  }
}

/** Why a session-level change is refused, and what to do instead, by what it changes. */
function sessionRefusalReason(setting: string): string {
  if (setting.startsWith('DEALLOCATE')) {
    return (
      "it drops named statements of the pooled connection, the library's among them, which " +
      'node-postgres still believes prepared there: every later request on that connection ' +
      'would fail. Deallocate only the statements the app itself prepared, by their names.'
    );
  }
  if (setting.includes('standard_conforming_strings')) {
    return (
      'it changes how strings are read in SQL text, which the library reads to keep the ' +
      "request's statements in its transaction. Write a string with backslash escapes as " +
      "E'…' instead."
    );
  }
  if (/default_transaction|CHARACTERISTICS/.test(setting)) {
    return (
      "a session's default for transactions stays with the pooled connection after the " +
      "request: the library's own statements and every later request on that connection would " +
      "run with it. Ask for a request's level with @Idempotent({ isolationLevel }) or the data " +
      "layer's transaction options, or SET TRANSACTION (or SET LOCAL) in the request's " +
      'transaction.'
    );
  }
  return (
    'a session-level role, session authorization or search path set in an idempotent request ' +
    'stays with the pooled connection after it, and every later request on that connection ' +
    'runs with it. Use SET LOCAL (SET LOCAL ROLE, SET LOCAL search_path) or ' +
    "set_config('role' | 'search_path', …, true): the request's COMMIT or ROLLBACK ends it."
  );
}

/**
 * Thrown to every statement (a query, a stream, a manager's helper, a transaction's start) of a
 * TypeORM query runner that was connected before the idempotent request's transaction could take
 * its statements (a guard's read or its `SET search_path` on a `Scope.REQUEST` unit of work's
 * runner) and is then used in the request, open or ended. Its session (search path, role, custom
 * settings) is its own connection's: run there, its writes commit apart from the request and its
 * retry writes them again; run in the request's transaction, they would land where the session
 * does not point. The library cannot place them without changing their meaning, so it refuses
 * them; the request rolls back. Its `release()` still gives its connection back.
 */
export class RunnerConnectedOutsideRequestError extends TransactionControlRefusedError {
  constructor() {
    super('a statement of a query runner connected outside the idempotent request');
    this.message =
      'A statement was sent in an idempotent request on a TypeORM query runner connected ' +
      'before the request began (a guard’s read or SET search_path, set_config(…, false) on a ' +
      'Scope.REQUEST unit of work’s runner): its session is its own connection’s, and its ' +
      'statements can run neither there (they would commit apart from the request, and its ' +
      'retry would run them again) nor in the request’s transaction (without that session). ' +
      'The request rolls back. Set the session inside the handler, with SET LOCAL (SET LOCAL ' +
      'search_path) or set_config(…, true); or connect the runner inside the handler, not in ' +
      'a guard, a pipe or an interceptor.';
    this.name = 'RunnerConnectedOutsideRequestError';
  }
}

/**
 * Thrown to a statement sent in an idempotent request (or phase) on a node-postgres client of
 * the joined pool that is not that scope's: a connection taken before the request (in
 * `onModuleInit`, a guard), one kept from another scope that became a connection of its own,
 * or a view of another scope's used where nothing joins (see `placeOfClient`). Its
 * writes would commit apart from the request, and a retry would write them again. Answered as
 * TypeORM's runner connected outside the request is (`runner_connected_outside_request`).
 */
export class ClientTakenElsewhereError extends RunnerConnectedOutsideRequestError {
  constructor() {
    super();
    this.message =
      'A statement was sent in an idempotent request (or phase) on a node-postgres client of ' +
      'the pool given to IdempotencyModule that this request did not take: one taken before ' +
      'the request (pool.connect() in onModuleInit, a guard), kept from a request or phase ' +
      'whose end made it a connection of its own. Its writes would commit apart from the request, and a retry ' +
      'would write them again. The request rolls back. Use pool.query(), or take the client ' +
      'with pool.connect() inside the handler (or phase) and release it there; for work that ' +
      'is not the request’s, take it in IdempotentTransaction.outside().';
    this.name = 'ClientTakenElsewhereError';
  }
}

/**
 * A node-postgres client of the pool, taken with `pool.connect()` in another request (or
 * phase) and kept (a batch writer's: `BEGIN` in one request, `COMMIT` in a later one), had a
 * transaction of its code's open when that request ended, however it ended (refused at its
 * commit, `NestedTransactionOpenAtCommitError`; or rolled back: its handler threw, its lease
 * was lost, a 503): the transaction went with it. A statement sent on
 * the client from this request is refused rather than failing with a bare error for as long as
 * the client is kept (adversary 104); the request rolls back, nothing stored
 * (`runner_connected_outside_request`).
 */
export class KeptClientTransactionGoneError extends ClientTakenElsewhereError {
  constructor() {
    super();
    this.message =
      'A statement was sent in an idempotent request (or phase) on a node-postgres client of ' +
      'the pool taken with pool.connect() in another request and kept, with a transaction its ' +
      'code began (BEGIN) still open when that request ended (refused at its commit, or rolled ' +
      'back: its handler threw, its lease was lost): the transaction rolled back with it, so ' +
      'nothing can run in it, and a COMMIT on it commits nothing. The request rolls back. ' +
      'A client’s own transaction cannot outlive the request it was taken in: take a client ' +
      'kept across requests (a batch) with pool.connect() in IdempotentTransaction.outside().';
    this.name = 'KeptClientTransactionGoneError';
  }
}

/**
 * A `COMMIT` (or `END`, `COMMIT AND CHAIN`, `PREPARE TRANSACTION`) was sent on a node-postgres
 * client of the pool taken with `pool.connect()` in a request (or phase) and kept, with a
 * transaction its code began there still open (a batch writer's: `BEGIN` in that request,
 * `COMMIT` from anywhere else: another request, a route without `@Idempotent()` or one that is
 * not atomic, another request's `outside()`, a timer). The client is a view of that request's
 * connection, and its transaction a savepoint in that request's: the `COMMIT` would only
 * release the savepoint, and the writes it meant to keep would commit or roll back with that
 * request (adversary 104, 106). Refused before it is sent: the sender learns its commit failed.
 * In an idempotent request the request rolls back, nothing stored
 * (`runner_connected_outside_request`); elsewhere the error reaches the code that sent it.
 */
export class KeptClientCommittedElsewhereError extends ClientTakenElsewhereError {
  constructor() {
    super();
    this.message =
      'COMMIT was sent on a node-postgres client of the pool taken with pool.connect() in an ' +
      'idempotent request (or phase) and kept, with a transaction its code began (BEGIN) in ' +
      'that request still open, from somewhere else (another request, a route that is not ' +
      'atomic, another request’s IdempotentTransaction.outside(), a timer): that transaction ' +
      'is part of the request that took the client, and would commit or roll back with it, ' +
      'not now, so the COMMIT was refused and nothing was committed. The writes sent on it ' +
      'stay in that request’s transaction. A client’s own transaction cannot outlive the ' +
      'request it was taken in: take a client kept across requests (a batch) with ' +
      'pool.connect() inside IdempotentTransaction.outside(), so its transactions are its own.';
    this.name = 'KeptClientCommittedElsewhereError';
  }
}

/**
 * Thrown to a statement that sets something for its transaction only (`SET LOCAL search_path`,
 * `SET LOCAL ROLE`, `set_config('app.tenant', …, true)`), sent through the TypeORM DataSource in
 * an idempotent request before its handler started (an interceptor bound inside
 * `@Idempotent()`, a pipe). The request's transaction is joined from the handler on; before it
 * the statement would run in autocommit on a connection of its own, where PostgreSQL only warns
 * and forgets it, and the handler's statements would run without that session (another tenant's
 * tables). Refused rather than lost; the request rolls back, answered as a runner connected
 * outside the request is (`runner_connected_outside_request`).
 */
export class SessionSetBeforeHandlerError extends RunnerConnectedOutsideRequestError {
  constructor() {
    super();
    this.message =
      'A statement that sets the session for its transaction only (SET LOCAL, set_config(…, ' +
      'true)) was sent in an idempotent request before its handler started (an interceptor ' +
      'bound inside @Idempotent(), a pipe), where the request’s transaction is not joined yet: ' +
      'it would have run on a connection of its own outside any transaction and been lost, and ' +
      'the handler’s statements would have run without it. The request rolls back. Set the ' +
      'session inside the handler (or a service it calls), with SET LOCAL or ' +
      'set_config(…, true) on the request’s manager.';
    this.name = 'SessionSetBeforeHandlerError';
  }
}

/**
 * Thrown when a transaction inside an idempotent request asks for an isolation level stronger
 * than the one the request's transaction already began at (PostgreSQL cannot raise it), or
 * for one PostgreSQL does not have. Nothing was sent: the request's transaction is as it was.
 */
export class IsolationLevelRefusedError extends Error {
  constructor(reason: string) {
    super(`isolation level refused: ${reason}`);
    this.name = 'IsolationLevelRefusedError';
  }
}

/**
 * The transaction could not commit because one of its statements had failed before (SQLSTATE
 * 25P02): the handler caught that error and went on, but PostgreSQL had already aborted
 * everything. `cause` is the statement's own error.
 */
export class TransactionAbortedError extends Error {
  constructor(override readonly cause: unknown) {
    super(`the transaction was aborted by an earlier failed statement: ${String(cause)}`);
    this.name = 'TransactionAbortedError';
  }
}

/** Thrown to code that uses the transaction after it committed or rolled back. */
export class TransactionEndedError extends Error {
  constructor(committedMidTransaction = false) {
    super(
      committedMidTransaction
        ? 'The idempotent request’s transaction committed while a nested transaction of work ' +
            'it left running was open: the rest of that nested transaction cannot run. Await ' +
            'database work before answering, or start work that is not the request’s with ' +
            'IdempotentTransaction.outside().'
        : 'The idempotent request’s transaction was rolled back: work it left running must not ' +
            'commit on its own, since a retry runs the request again. Await database work before ' +
            'answering, or start work that is not the request’s with IdempotentTransaction.outside().',
    );
    this.name = 'TransactionEndedError';
  }
}

/**
 * Thrown to code that uses a client of the pool after giving it back (`client.release()`;
 * with `true` or an error, node-postgres ends it and refuses whatever is called on it after),
 * and to a statement of its nested transaction still running when it was given back to be
 * destroyed (an `UPDATE` stuck on a lock), which that release rolled back: work given up on
 * stops there, and none of it commits with the request.
 */
export class ReleasedClientError extends Error {
  constructor(running = false) {
    super(
      running
        ? 'The client of the pool was given back to be destroyed (release(true)) while this ' +
            'statement ran: its nested transaction was rolled back, as node-postgres ends the ' +
            'connection. Take a new client with pool.connect() to go on.'
        : 'A statement on a client of the pool after it was given back (release()) was ' +
            'refused: on the idempotent request’s connection it would run with no transaction ' +
            'of its own, or be kept apart for good. Take a new client with pool.connect() to go on.',
    );
    this.name = 'ReleasedClientError';
  }
}

/**
 * A statement of a try of the route's handler that an interceptor inside `@Idempotent()` has
 * retried since (its Promise settled while work of it still ran: a sibling step of a
 * `Promise.all` that rejected): that try failed, and its work would commit with the next try's
 * answer in the request's one transaction. Refused; the request goes on with the retry.
 */
export class RetriedTryStatementError extends Error {
  constructor() {
    super(
      'A statement of a try of the handler that was retried since (work of it still running ' +
        'after its Promise settled, such as a step of a Promise.all that rejected) was refused: ' +
        'that try failed, and its work would have committed with the retry’s answer. Await ' +
        'every step of a try (Promise.allSettled), or write @Idempotent() above the retry ' +
        'interceptor, so that each try runs in a transaction of its own.',
    );
    this.name = 'RetriedTryStatementError';
  }
}

/**
 * A phase (`call()` or `run()`) started inside the work of a `oneCommit` route's first phase,
 * which holds the key's claim uncommitted: the claim can commit only when that phase does, so
 * the inner one could never begin. Refused at once; run phases one after the other.
 */
export class NestedFirstPhaseError extends Error {
  constructor() {
    super(
      "a phase started inside the work of a oneCommit route's first phase, which commits the " +
        "key's claim with its own work: the inner phase would wait for that commit for ever. " +
        'Run phases one after the other (or set oneCommit: false on the route)',
    );
    this.name = 'NestedFirstPhaseError';
  }
}
