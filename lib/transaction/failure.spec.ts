import {
  GatewayTimeoutException,
  HttpException,
  NotFoundException,
  RequestTimeoutException,
} from '@nestjs/common';
import { TimeoutError } from 'rxjs';
import { DatabaseError } from 'pg';
import { QueryFailedError } from 'typeorm';
import {
  classifyCommitError,
  classifyHandlerError,
  isPassing,
  isTimeoutError,
  CAUGHT_FATES,
  REFUSAL_FATES,
  refusalAnswer,
  refusalFate,
  type RefusalFate,
  refusedAfter,
  strongerRefusal,
} from './failure.js';
import * as seam from './seam-errors.js';
import {
  IdempotencyCursorOpenError,
  IdempotencyLeaseLostError,
  IdempotencyPhaseNameInvalidError,
  IdempotencyRunnerConnectedOutsideRequestError,
  IdempotencyStatementBesidePhaseError,
  IdempotencyStoreUnavailableError,
  IdempotencySubscriberTransactionOpenError,
  PermanentDatabaseError,
  RetryLaterError,
  TransientDatabaseError,
} from '../shapes/idempotency.errors.js';
import {
  asDatabaseFailure,
  DatabaseDeadlineError,
  markAskedByApp,
} from '../connection/connection-errors.js';
import {
  CursorOpenRefusedError,
  RetriedTryStatementError,
  RunnerConnectedOutsideRequestError,
  SessionAdvisoryLockRefusedError,
  SessionSettingRefusedError,
  StatementBesidePhaseRefusedError,
  SubscriberTransactionOpenError,
  TransactionAbortedError,
  TransactionControlRefusedError,
} from './seam-errors.js';

/** PostgreSQL's own answer, as node-postgres' parser builds it. */
const pgError = (code: string, message = `pg ${code}`) =>
  Object.assign(new DatabaseError(message, 0, 'error'), { severity: 'ERROR', code });
/** A named statement's server session changed under it: a pooler in transaction mode. */
const missing = () =>
  pgError('26000', 'prepared statement "idempotency_complete_v3" does not exist');
const duplicate = () =>
  pgError('42P05', 'prepared statement "idempotency_claim_v3" already exists');
const typeorm = (code: string) => new QueryFailedError('SELECT 1', [], pgError(code));
/** A backend ended by `pg_terminate_backend` (or a shutdown), as node-postgres raises it. */
const terminated = () =>
  Object.assign(
    new DatabaseError('terminating connection due to administrator command', 0, 'error'),
    { severity: 'FATAL', code: '57P01' },
  );
/** A socket's error: from a database connection, or from the handler's own HTTP call. */
const socket = (code: string) =>
  Object.assign(new Error(`read ${code}`), { code, syscall: 'read' });

describe('classifyHandlerError', () => {
  it.each<[string, unknown, string, string | undefined]>([
    ['RetryLaterError', new RetryLaterError(), 'retry', 'retry_later'],
    ['store unavailable', new IdempotencyStoreUnavailableError(null), 'retry', 'store_unavailable'],
    ['lease lost', new IdempotencyLeaseLostError(), 'lease-lost', 'lease_lost'],
    ['deadlock 40P01', typeorm('40P01'), 'retry', 'database_transient'],
    ['serialization failure 40001', pgError('40001'), 'retry', 'database_transient'],
    ['statement timeout 57014', typeorm('57014'), 'retry', 'database_transient'],
    [
      "the app's own cancel (pg_cancel_backend), 57014 due to user request",
      markAskedByApp(pgError('57014', 'canceling statement due to user request')),
      'retry',
      'transaction_aborted',
    ],
    [
      "an operator's cancel (the same 57014, not asked for by the app): passing",
      pgError('57014', 'canceling statement due to user request'),
      'retry',
      'database_transient',
    ],
    [
      "the app's own end of its connection (pg_terminate_backend), 57P01",
      markAskedByApp(terminated()),
      'retry',
      'transaction_aborted',
    ],
    [
      "the app's own end, under TypeORM's wrapper",
      new QueryFailedError('SELECT 1', [], markAskedByApp(terminated())),
      'retry',
      'transaction_aborted',
    ],
    [
      "a shutdown or an operator's end (57P01, not asked for)",
      terminated(),
      'retry',
      'store_unavailable',
    ],
    ['lock timeout 55P03', typeorm('55P03'), 'retry', 'database_transient'],
    [
      'connection refused to the database',
      asDatabaseFailure(socket('ECONNREFUSED')),
      'retry',
      'store_unavailable',
    ],
    [
      'a database connection reset under a statement',
      new QueryFailedError('SELECT 1', [], socket('ECONNRESET')),
      'retry',
      'store_unavailable',
    ],
    [
      "node-postgres' query_timeout",
      new QueryFailedError('SELECT 1', [], new Error('Query read timeout')),
      'retry',
      'store_unavailable',
    ],
    ['the handler’s own HTTP call reset (ECONNRESET)', socket('ECONNRESET'), 'final', undefined],
    [
      'the handler’s own HTTP call refused (ECONNREFUSED)',
      socket('ECONNREFUSED'),
      'final',
      undefined,
    ],
    ['admin shutdown 57P01', typeorm('57P01'), 'retry', 'store_unavailable'],
    ['the pool waited too long', new DatabaseDeadlineError('x', 1), 'retry', 'store_unavailable'],
    ['a pooler misfit 26000', missing(), 'retry', 'store_misconfigured'],
    [
      'a pooler misfit 42P05, under TypeORM',
      { driverError: duplicate() },
      'retry',
      'store_misconfigured',
    ],
    [
      'the library’s statement refused for good',
      new PermanentDatabaseError(typeorm('42P01')),
      'retry',
      'database_permanent',
    ],
    // The handler's own statements keep their meaning: its answer, stored.
    ['the handler’s own undefined table 42P01', typeorm('42P01'), 'final', undefined],
    ['the handler’s own missing privilege 42501', typeorm('42501'), 'final', undefined],
    ['unique violation 23505', typeorm('23505'), 'final', undefined],
    ['a 404 the handler threw', new NotFoundException(), 'final', undefined],
    ['an HttpException 503 of the app', new HttpException('x', 503), 'final', undefined],
    ['a bug', new TypeError('x is undefined'), 'final', undefined],
    [
      'a statement refused behind an open cursor',
      new CursorOpenRefusedError(),
      'retry',
      'cursor_open',
    ],
    [
      'a statement of the request refused beside a running phase',
      new StatementBesidePhaseRefusedError(),
      'retry',
      'statement_beside_phase',
    ],
    [
      'outside() work past its wait for a connection',
      new DatabaseDeadlineError('waiting', 1500),
      'retry',
      'store_unavailable',
    ],
    // A phase's commit (or its work's next statement) after a failure its code caught: what
    // aborted the transaction decides.
    [
      'aborted by a caught lock timeout',
      new TransactionAbortedError(typeorm('55P03')),
      'retry',
      'database_transient',
    ],
    [
      'aborted by a caught unique violation',
      new TransactionAbortedError(typeorm('23505')),
      'final',
      undefined,
    ],
    [
      'a commit refused: its subscriber left a transaction open',
      new SubscriberTransactionOpenError('beforeTransactionCommit'),
      'retry',
      'subscriber_transaction_open',
    ],
    [
      'aborted by a statement refused behind a cursor',
      new TransactionAbortedError(new CursorOpenRefusedError()),
      'retry',
      'cursor_open',
    ],
  ])('%s -> %s', (_name, error, kind, code) => {
    const failure = classifyHandlerError(error);
    expect(failure.kind).toBe(kind);
    expect(failure.kind === 'final' ? undefined : failure.error.code).toBe(code);
  });
});

describe('classifyCommitError', () => {
  it.each<[string, unknown, string]>([
    ['no answer in time', new DatabaseDeadlineError('COMMIT', 5), 'store_unavailable'],
    ['connection lost', new Error('Connection terminated unexpectedly'), 'store_unavailable'],
    [
      'query_timeout at COMMIT (its outcome unknown)',
      new Error('Query read timeout'),
      'store_unavailable',
    ],
    ['the socket reset at COMMIT', asDatabaseFailure(socket('ECONNRESET')), 'store_unavailable'],
    ['serialization failure at COMMIT', typeorm('40001'), 'database_transient'],
    [
      'aborted by a deadlock the handler caught',
      new TransactionAbortedError(typeorm('40P01')),
      'database_transient',
    ],
    [
      'aborted by a unique violation the handler caught',
      new TransactionAbortedError(typeorm('23505')),
      'transaction_aborted',
    ],
    [
      "aborted by the app's own cancel (pg_cancel_backend) of a statement it gave up on",
      new TransactionAbortedError(
        markAskedByApp(pgError('57014', 'canceling statement due to user request')),
      ),
      'transaction_aborted',
    ],
    [
      "aborted by an operator's cancel (pg_cancel_backend from psql): passing",
      new TransactionAbortedError(pgError('57014', 'canceling statement due to user request')),
      'database_transient',
    ],
    [
      "the commit on a connection the app's own code ended",
      markAskedByApp(new Error('Client has encountered a connection error and is not queryable')),
      'transaction_aborted',
    ],
    [
      'the commit on a connection lost otherwise',
      new Error('Client has encountered a connection error and is not queryable'),
      'store_unavailable',
    ],
    [
      'aborted by a statement timeout',
      new TransactionAbortedError(pgError('57014', 'canceling statement due to statement timeout')),
      'database_transient',
    ],
    ['a deferred constraint failing at COMMIT', typeorm('23505'), 'transaction_aborted'],
    ['the fenced statement missing on a pooled session', missing(), 'store_misconfigured'],
    ['the first statement already on a pooled session', duplicate(), 'store_misconfigured'],
    ['aborted by a pooler misfit', new TransactionAbortedError(duplicate()), 'store_misconfigured'],
    ['already one of ours', new TransientDatabaseError(null), 'database_transient'],
    [
      'a statement refused behind an open cursor, the handler went on',
      new TransactionAbortedError(new CursorOpenRefusedError()),
      'cursor_open',
    ],
    [
      'a rollback refused: its subscriber left a transaction open, the handler went on',
      new TransactionAbortedError(new SubscriberTransactionOpenError('beforeTransactionRollback')),
      'subscriber_transaction_open',
    ],
    [
      'a statement refused beside a running phase, the handler went on',
      new TransactionAbortedError(new StatementBesidePhaseRefusedError()),
      'statement_beside_phase',
    ],
  ])('%s -> %s', (_name, error, code) => {
    expect(classifyCommitError(error).code).toBe(code);
  });
});

describe('isPassing: what a consumer never counts against its message', () => {
  it.each<[string, unknown, boolean]>([
    ['the database unreachable', asDatabaseFailure(socket('ECONNREFUSED')), true],
    ['a deadlock', typeorm('40P01'), true],
    ['a pooler misfit', missing(), true],
    ['RetryLaterError', new RetryLaterError(), true],
    ['a table of the library missing', new PermanentDatabaseError(typeorm('42P01')), false],
    ['a privilege missing', new PermanentDatabaseError(typeorm('42501')), false],
    [
      "the app's own cancel of a statement (57014 due to user request)",
      markAskedByApp(pgError('57014', 'canceling statement due to user request')),
      false,
    ],
    [
      "an operator's cancel of a statement (the same 57014, not the app's)",
      pgError('57014', 'canceling statement due to user request'),
      true,
    ],
    ['the handler’s bug', new TypeError('x'), false],
    ['lease lost', new IdempotencyLeaseLostError(), false],
    ['a statement refused behind an open cursor', new CursorOpenRefusedError(), false],
    [
      'a subscriber’s transaction left open (the same code on every delivery)',
      new SubscriberTransactionOpenError('beforeTransactionCommit'),
      false,
    ],
  ])('%s -> %s', (_name, error, expected) => {
    expect(isPassing(classifyHandlerError(error))).toBe(expected);
  });
});

describe('isTimeoutError: not done in time, never a stored answer', () => {
  it.each([
    ["Nest's RequestTimeoutException (408)", new RequestTimeoutException(), true],
    ["Nest's GatewayTimeoutException (504)", new GatewayTimeoutException(), true],
    ['an HttpException of status 408', new HttpException('slow', 408), true],
    ["RxJS' TimeoutError, unmapped", new TimeoutError(), true],
    ['a 404 the handler threw', new NotFoundException(), false],
    ['a 503 of its own', new HttpException('down', 503), false],
    ['a plain error', new Error('boom'), false],
    ['not an object', 'timeout', false],
  ])('%s: %s', (_case, error, expected) => {
    expect(isTimeoutError(error)).toBe(expected);
  });
});

/**
 * What `classifyHandlerError` gives as a `retry` (or `lease-lost`) error is judged the same when
 * it is thrown on: `PhaseRunner` hands a phase's or `finish()`'s refusal on in the library's
 * words, and the request classifies what reaches it again (adversary 98: a refusal of a runner
 * connected outside the request, wrapped so, was stored as the handler's 500).
 */
describe('classifyHandlerError: the library’s wrapper of a failure is classified as what it wraps', () => {
  const refusals: [string, () => unknown, string][] = [
    ['an open cursor', () => new CursorOpenRefusedError(), 'cursor_open'],
    [
      'a statement beside a phase',
      () => new StatementBesidePhaseRefusedError(),
      'statement_beside_phase',
    ],
    [
      'a subscriber’s transaction left open',
      () => new SubscriberTransactionOpenError('beforeTransactionCommit'),
      'subscriber_transaction_open',
    ],
    [
      'a runner connected outside the request',
      () => new RunnerConnectedOutsideRequestError(),
      'runner_connected_outside_request',
    ],
  ];
  const wrappers: [string, (refusal: unknown) => unknown][] = [
    ['as the seam raised it', (refusal) => refusal],
    ['under TypeORM’s QueryFailedError', (refusal) => ({ driverError: refusal })],
    ['as what aborted the transaction', (refusal) => new TransactionAbortedError(refusal)],
  ];
  it.each(
    refusals.flatMap(([name, make, code]) =>
      wrappers.map(([how, wrap]) => [`${name}, ${how}`, make, wrap, code] as const),
    ),
  )('%s: retry, and so again once handed on (twice)', (_name, make, wrap, code) => {
    const first = classifyHandlerError(wrap(make()));
    expect(first.kind === 'retry' ? first.error.code : first.kind).toBe(code);
    if (first.kind !== 'retry') return;
    const handedOn = classifyHandlerError(first.error);
    expect(handedOn).toEqual(first);
    expect(handedOn.kind === 'retry' ? handedOn.error : undefined).toBe(first.error);
    // A phase's refusal as the commit after it meets it (the work caught it and went on).
    const aborted = classifyHandlerError(new TransactionAbortedError(first.error));
    expect(aborted.kind === 'retry' ? aborted.error.code : aborted.kind).toBe(code);
  });

  it.each<[string, unknown]>([
    ['RetryLaterError', new RetryLaterError()],
    ['store unavailable', new IdempotencyStoreUnavailableError(null)],
    ['lease lost', new IdempotencyLeaseLostError()],
    ['deadlock 40P01', typeorm('40P01')],
    ['a pooler misfit 26000', missing()],
    ['the library’s statement refused for good', new PermanentDatabaseError(typeorm('42P01'))],
    ["the app's own cancel", markAskedByApp(pgError('57014', 'canceling statement'))],
    ['a retried try’s statement', new RetriedTryStatementError()],
    ['a phase name PostgreSQL cannot record', new IdempotencyPhaseNameInvalidError('a\u0000b')],
  ])('%s: the same failure when its error is classified again', (_name, error) => {
    const first = classifyHandlerError(error);
    expect(first.kind).not.toBe('final');
    if (first.kind === 'final') return;
    expect(classifyHandlerError(first.error)).toEqual(first);
  });

  it.each<[string, unknown, string]>([
    ['IdempotencyCursorOpenError', new IdempotencyCursorOpenError(null), 'cursor_open'],
    [
      'IdempotencyStatementBesidePhaseError',
      new IdempotencyStatementBesidePhaseError(null),
      'statement_beside_phase',
    ],
    [
      'IdempotencySubscriberTransactionOpenError',
      new IdempotencySubscriberTransactionOpenError(null),
      'subscriber_transaction_open',
    ],
    [
      'IdempotencyRunnerConnectedOutsideRequestError',
      new IdempotencyRunnerConnectedOutsideRequestError(null),
      'runner_connected_outside_request',
    ],
  ])('%s made anywhere (classifyCommitError, a rethrow): retry %s', (_name, error, code) => {
    const failure = classifyHandlerError(error);
    expect(failure.kind === 'retry' ? failure.error.code : failure.kind).toBe(code);
  });
});

/**
 * A transaction the seam refused answers its refusal whatever its handler made of it (caught,
 * then its own 409 or `Error`), when the refusal is one that is never stored; the others (its
 * code's own COMMIT, a session's setting) leave the handler's answer standing.
 */
describe('refusalAnswer', () => {
  it.each<[string, unknown, string | undefined]>([
    ['no refusal', undefined, undefined],
    ['an open cursor', new CursorOpenRefusedError(), 'cursor_open'],
    [
      'a statement beside a phase',
      new StatementBesidePhaseRefusedError(),
      'statement_beside_phase',
    ],
    [
      'a subscriber’s transaction left open',
      new SubscriberTransactionOpenError('afterTransactionCommit'),
      'subscriber_transaction_open',
    ],
    [
      'a runner connected outside the request',
      new RunnerConnectedOutsideRequestError(),
      'runner_connected_outside_request',
    ],
    ['a concurrent save that failed', new seam.ConcurrentSaveFailedError(), 'transaction_aborted'],
    [
      'a nested transaction open at the commit',
      new seam.NestedTransactionOpenAtCommitError(),
      'transaction_aborted',
    ],
    ['a savepoint across runners', savepointAcrossRunners(), 'transaction_aborted'],
    ['its code’s own COMMIT', new TransactionControlRefusedError('COMMIT'), undefined],
    ['a session’s setting', new SessionSettingRefusedError('search_path'), undefined],
    [
      'a session-level advisory lock',
      new SessionAdvisoryLockRefusedError('pg_advisory_lock'),
      undefined,
    ],
  ])('%s -> %s', (_name, refusal, code) => {
    expect(refusalAnswer(refusal)?.code).toBe(code);
  });
});

/** A `SavepointAcrossRunnersError` as the TypeORM seam makes it (by name: lib/data-layers). */
function savepointAcrossRunners(): TransactionControlRefusedError {
  const error = new TransactionControlRefusedError('ROLLBACK TO SAVEPOINT step');
  error.name = 'SavepointAcrossRunnersError';
  return error;
}

/**
 * One table says, for every refusal the request's transaction can record, whether the
 * handler's answer after it is ever stored (adversary 100): the docs' "nothing stored" ones
 * never are, caught or not, in a phase or in the handler.
 */
describe('REFUSAL_FATES: every refusal the transaction records, and what becomes of it', () => {
  it.each<[string, string]>([
    ['CursorOpenRefusedError', 'own'],
    ['StatementBesidePhaseRefusedError', 'own'],
    ['SubscriberTransactionOpenError', 'own'],
    ['RunnerConnectedOutsideRequestError', 'own'],
    ['SessionSetBeforeHandlerError', 'own'],
    ['ClientTakenElsewhereError', 'own'],
    ['KeptClientTransactionGoneError', 'own'],
    ['KeptClientCommittedElsewhereError', 'own'],
    ['ConcurrentSaveFailedError', 'aborted'],
    ['NestedTransactionOpenAtCommitError', 'aborted'],
    ['SavepointAcrossRunnersError', 'aborted'],
    ['TransactionControlRefusedError', 'stored'],
    ['SessionAdvisoryLockRefusedError', 'stored'],
    ['SessionSettingRefusedError', 'stored'],
    ['ReadOnlyTransactionRefusedError', 'stored'],
    ['UnreadableStatementRefusedError', 'stored'],
    ['ListenAmongStatementsRefusedError', 'stored'],
    ['StatementBesideNestedTransactionError', 'stored'],
    ['NestedTurnTimeoutError', 'stored'],
  ])('%s -> %s', (name, fate) => {
    expect(REFUSAL_FATES[name]).toBe(fate);
  });

  it('names every refusal of the seam', () => {
    const refusals = Object.entries(seam)
      .filter(
        ([, value]) =>
          typeof value === 'function' &&
          (value === seam.TransactionControlRefusedError ||
            value.prototype instanceof seam.TransactionControlRefusedError),
      )
      .map(([name]) => name);
    expect(refusals.filter((name) => !(name in REFUSAL_FATES))).toEqual([]);
  });

  it.each<[string, unknown, string | undefined]>([
    ['no refusal', undefined, undefined],
    ['a plain Error', new Error('x'), undefined],
    [
      'a subclass of a known refusal',
      new (class extends seam.ConcurrentSaveFailedError {})(),
      'aborted',
    ],
    [
      'an unknown refusal',
      Object.assign(new TransactionControlRefusedError('x'), { name: 'New' }),
      'stored',
    ],
  ])('refusalFate(%s) -> %s', (_name, refusal, fate) => {
    expect(refusalFate(refusal)).toBe(fate);
  });

  it.each<[string, unknown, string, string | undefined]>([
    [
      'a refusal its code caught and went on from, at the commit',
      new seam.TransactionAbortedError(new SessionAdvisoryLockRefusedError('pg_advisory_lock')),
      'retry',
      'transaction_aborted',
    ],
    [
      'a savepoint across runners let out',
      savepointAcrossRunners(),
      'retry',
      'transaction_aborted',
    ],
    [
      'a concurrent save let out',
      new seam.ConcurrentSaveFailedError(),
      'retry',
      'transaction_aborted',
    ],
    [
      'a session-level advisory lock let out: the error answer stored',
      new SessionAdvisoryLockRefusedError('pg_advisory_lock'),
      'final',
      undefined,
    ],
  ])('classifyHandlerError(%s) -> %s %s', (_name, error, kind, code) => {
    const failure = classifyHandlerError(error);
    expect(failure.kind).toBe(kind);
    expect(failure.kind === 'final' ? undefined : failure.error.code).toBe(code);
  });
});

describe('strongerRefusal: the refusal a request keeps is the one with the strongest fate', () => {
  const lock = new SessionAdvisoryLockRefusedError('pg_advisory_lock');
  const setting = new SessionSettingRefusedError('statement_timeout');
  const cursor = new CursorOpenRefusedError();
  const beside = new StatementBesidePhaseRefusedError();
  const save = new seam.ConcurrentSaveFailedError();
  const nested = new seam.NestedTransactionOpenAtCommitError();
  const unknown = Object.assign(new TransactionControlRefusedError('x'), { name: 'New' });

  it.each<
    [
      string,
      TransactionControlRefusedError | undefined,
      TransactionControlRefusedError,
      TransactionControlRefusedError,
    ]
  >([
    ['none kept: the one met', undefined, lock, lock],
    ['none kept, own met', undefined, cursor, cursor],
    ['stored kept, own met: own', lock, cursor, cursor],
    ['stored kept, aborted met: aborted', lock, save, save],
    ['aborted kept, own met: own', save, cursor, cursor],
    ['own kept, stored met: own', cursor, lock, cursor],
    ['own kept, aborted met: own', cursor, save, cursor],
    ['aborted kept, stored met: aborted', save, lock, save],
    ['stored kept, stored met: the first', lock, setting, lock],
    ['aborted kept, aborted met: the first', save, nested, save],
    ['own kept, own met: the first', cursor, beside, cursor],
    ['an unknown refusal (stored) kept, own met: own', unknown, cursor, cursor],
    ['own kept, an unknown refusal met: own', cursor, unknown, cursor],
  ])('%s', (_name, kept, met, expected) => {
    expect(strongerRefusal(kept, met)).toBe(expected);
  });
});

describe('CAUGHT_FATES: what a refusal becomes once its code caught it and went on', () => {
  it.each<[RefusalFate, RefusalFate]>([
    ['own', 'own'],
    ['aborted', 'aborted'],
    // answered anyway, its commit is refused: 500 transaction_aborted, nothing stored
    ['stored', 'aborted'],
  ])('%s -> %s', (fate, caught) => {
    expect(CAUGHT_FATES[fate]).toBe(caught);
  });
});

describe('refusedAfter: what a phase, call() or finish() started after a refusal throws', () => {
  const lock = new SessionAdvisoryLockRefusedError('pg_advisory_lock');
  const unknown = new TransactionControlRefusedError('x');
  it.each<[string, unknown, 'none' | 'the refusal' | 'its refused commit', string | undefined]>([
    ['no refusal', undefined, 'none', undefined],
    ['a plain Error', new Error('x'), 'none', undefined],
    ['cursor_open (own)', new CursorOpenRefusedError(), 'the refusal', 'cursor_open'],
    [
      'a statement beside a phase (own)',
      new StatementBesidePhaseRefusedError(),
      'the refusal',
      'statement_beside_phase',
    ],
    [
      'a concurrent save (aborted)',
      new seam.ConcurrentSaveFailedError(),
      'the refusal',
      'transaction_aborted',
    ],
    ['a session advisory lock (stored), caught', lock, 'its refused commit', 'transaction_aborted'],
    ['an unknown refusal (stored), caught', unknown, 'its refused commit', 'transaction_aborted'],
  ])('%s -> %s, answered %s', (_name, refusal, thrown, code) => {
    const error = refusedAfter(refusal);
    const shape =
      error === undefined
        ? 'none'
        : error === refusal
          ? 'the refusal'
          : error instanceof TransactionAbortedError && error.cause === refusal
            ? 'its refused commit'
            : 'other';
    expect(shape).toBe(thrown);
    const failure = error === undefined ? undefined : classifyHandlerError(error);
    expect(failure?.kind === 'retry' ? failure.error.code : undefined).toBe(code);
  });
});
