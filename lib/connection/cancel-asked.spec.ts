import { DatabaseError } from 'pg';
import {
  answersSameAsked,
  cancelsAskedIn,
  forgetCancelAsked,
  noteAnswer,
  noteCancelAsked,
  statementCalled,
  type CancelAsked,
} from './cancel-asked.js';
import {
  answersAsked,
  asDatabaseFailure,
  type CancelKind,
  isCancelAskedForError,
  markAskedByApp,
} from './connection-errors.js';

/** PostgreSQL's own answer, as node-postgres' parser builds it. */
const server = (code: string, message: string, severity = 'ERROR') =>
  Object.assign(new DatabaseError(message, 0, 'error'), { severity, code });
const userCancel = () => server('57014', 'canceling statement due to user request');
const timeout = () => server('57014', 'canceling statement due to statement timeout');
const terminated = () =>
  server('57P01', 'terminating connection due to administrator command', 'FATAL');
const notQueryable = () =>
  new Error('Client has encountered a connection error and is not queryable');
const socket = () =>
  asDatabaseFailure(Object.assign(new Error('read ECONNRESET'), { code: 'ECONNRESET' }));

describe('cancelsAskedIn: the backends a statement asks to cancel or end, by pid', () => {
  it.each<[string, unknown, unknown[] | undefined, CancelAsked[]]>([
    // Kysely's control queries ('cancel query', 'kill session').
    ['a literal cancel', 'select pg_cancel_backend(4242)', [], [{ kind: 'cancel', pid: 4242 }]],
    ['a literal end', 'select pg_terminate_backend(17)', [], [{ kind: 'terminate', pid: 17 }]],
    [
      'an end with its timeout',
      'SELECT pg_terminate_backend(17, 5000)',
      [],
      [{ kind: 'terminate', pid: 17 }],
    ],
    ['a parameter', 'SELECT pg_cancel_backend($1)', [99], [{ kind: 'cancel', pid: 99 }]],
    ['a parameter as text', 'SELECT pg_cancel_backend($1)', ['99'], [{ kind: 'cancel', pid: 99 }]],
    [
      'a parameter as a BigInt',
      'SELECT pg_cancel_backend($1)',
      [99n],
      [{ kind: 'cancel', pid: 99 }],
    ],
    ['a BigInt past safe integers', 'SELECT pg_cancel_backend($1)', [2n ** 60n], []],
    ['a cast parameter', 'SELECT pg_cancel_backend($2::int)', [0, 7], [{ kind: 'cancel', pid: 7 }]],
    ['upper case, spaced', 'SELECT PG_CANCEL_BACKEND ( 5 )', [], [{ kind: 'cancel', pid: 5 }]],
    [
      'two in one text',
      'select pg_cancel_backend(1), pg_terminate_backend(2)',
      [],
      [
        { kind: 'cancel', pid: 1 },
        { kind: 'terminate', pid: 2 },
      ],
    ],
    // Backends picked by what they do (an operator's query): no pid of the request's to read.
    [
      'a pid from a subquery',
      "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE wait_event_type = 'Lock'",
      [],
      [],
    ],
    ['a parameter not given', 'SELECT pg_cancel_backend($1)', [], []],
    ['a parameter not a pid', 'SELECT pg_cancel_backend($1)', ['x'], []],
    ['pid 0', 'SELECT pg_cancel_backend(0)', [], []],
    ['an ordinary statement', 'SELECT pg_backend_pid()', [], []],
    ['no text', undefined, undefined, []],
    ['a config object, not text', { text: 'x' }, [], []],
  ])('%s', (_name, text, values, expected) => {
    expect(cancelsAskedIn(text, values)).toEqual(expected);
  });
});

describe('answersAsked: the errors a cancel or an end asked for gives', () => {
  it.each<[string, CancelKind, unknown, boolean]>([
    ['a cancel: 57014 due to user request', 'cancel', userCancel(), true],
    ['a cancel: not a statement timeout', 'cancel', timeout(), false],
    [
      'a cancel: not a lock timeout',
      'cancel',
      server('57014', 'canceling statement due to lock timeout'),
      false,
    ],
    [
      'a cancel: its answer under a translated lc_messages',
      'cancel',
      server('57014', 'Anfrage wird wegen Benutzeraufforderung storniert'),
      true,
    ],
    ['a cancel: not the connection lost', 'cancel', terminated(), false],
    ['an end: 57P01', 'terminate', terminated(), true],
    ['an end: the client no longer queryable', 'terminate', notQueryable(), true],
    ['an end: the socket reset', 'terminate', socket(), true],
    ['an end: not a cancel', 'terminate', userCancel(), false],
    ['an end: not a unique violation', 'terminate', server('23505', 'duplicate key'), false],
  ])('%s -> %s', (_name, kind, error, expected) => {
    expect(answersAsked(kind, error)).toBe(expected);
  });
});

describe('noteAnswer: what a connection meets after its own code asked to cancel or end it', () => {
  it('marks nothing on a connection nothing was asked of', () => {
    const error = userCancel();
    noteAnswer({}, error);
    expect(isCancelAskedForError(error)).toBe(false);
  });

  it('marks the one statement a cancel ended, and no later one', () => {
    const client = {};
    noteCancelAsked(client, 'cancel');
    const other = server('23505', 'duplicate key');
    noteAnswer(client, other);
    const cancelled = userCancel();
    noteAnswer(client, cancelled);
    const later = userCancel();
    noteAnswer(client, later);
    expect([other, cancelled, later].map((error) => isCancelAskedForError(error))).toEqual([
      false,
      true,
      false,
    ]);
  });

  it('marks every loss after an end: the connection is gone', () => {
    const client = {};
    noteCancelAsked(client, 'cancel');
    noteCancelAsked(client, 'terminate');
    noteCancelAsked(client, 'cancel');
    const errors = [terminated(), notQueryable(), notQueryable()];
    for (const error of errors) noteAnswer(client, error);
    expect(errors.map((error) => isCancelAskedForError(error))).toEqual([true, true, true]);
  });

  // A cancel that lands while no statement runs is dropped by PostgreSQL: a statement called
  // after it that ends without its 57014 shows that, and a later cancel (an operator's, a
  // deadline's) is no longer the app's. One called before it may end before it lands.
  it.each<[string, 'before' | 'after', 'success' | 'other error', boolean]>([
    ['called after the ask, succeeded: the cancel was dropped', 'after', 'success', false],
    ['called after the ask, another error: the cancel was dropped', 'after', 'other error', false],
    ['called before the ask, succeeded: it may still land', 'before', 'success', true],
    ['called before the ask, another error: it may still land', 'before', 'other error', true],
  ])('a statement %s -> a later 57014 the app own: %s', (_name, when, outcome, expected) => {
    const client = {};
    const before = statementCalled();
    noteCancelAsked(client, 'cancel');
    const calledAt = when === 'before' ? before : statementCalled();
    noteAnswer(client, outcome === 'success' ? undefined : server('23505', 'dup'), calledAt);
    const later = userCancel();
    noteAnswer(client, later, statementCalled());
    expect(isCancelAskedForError(later)).toBe(expected);
  });

  it('keeps an end asked for past a statement that succeeded', () => {
    const client = {};
    noteCancelAsked(client, 'terminate');
    noteAnswer(client, undefined, statementCalled());
    const error = terminated();
    noteAnswer(client, error, statementCalled());
    expect(isCancelAskedForError(error)).toBe(true);
  });

  it('forgets what was asked once the connection goes back to the pool', () => {
    const client = {};
    noteCancelAsked(client, 'cancel');
    forgetCancelAsked(client);
    const error = userCancel();
    noteAnswer(client, error);
    expect(isCancelAskedForError(error)).toBe(false);
  });
});

/** node-postgres' error as Prisma 7 hands it on: rebuilt from a plain description. */
const prisma = (originalCode: string, originalMessage: string) =>
  Object.assign(new Error(originalMessage), {
    name: 'PrismaClientKnownRequestError',
    meta: {
      driverAdapterError: Object.assign(new Error(originalMessage), {
        name: 'DriverAdapterError',
        cause: { kind: 'postgres', originalCode, originalMessage },
      }),
    },
  });
const prismaClosed = () =>
  Object.assign(new Error('Server has closed the connection.'), {
    name: 'PrismaClientKnownRequestError',
    meta: {
      driverAdapterError: Object.assign(new Error('ConnectionClosed'), {
        name: 'DriverAdapterError',
        cause: { kind: 'ConnectionClosed' },
      }),
    },
  });

describe("answersSameAsked: the request's error is its own cancel's answer, as a data layer hands it on", () => {
  const own = <T>(error: T) => markAskedByApp(error);
  it.each<[string, unknown, unknown, boolean]>([
    [
      "Prisma's 57014 after the app's cancel",
      own(userCancel()),
      prisma('57014', 'canceling statement due to user request'),
      true,
    ],
    ["node-postgres' own 57014 after the app's cancel", own(userCancel()), userCancel(), true],
    ["Prisma's lost connection after the app's end", own(notQueryable()), prismaClosed(), true],
    ["a socket error after the app's end", own(terminated()), socket(), true],
    [
      "Prisma's 57014 after someone else's cancel (not marked)",
      userCancel(),
      prisma('57014', 'canceling statement due to user request'),
      false,
    ],
    [
      "a statement timeout after the app's cancel",
      own(userCancel()),
      prisma('57014', 'canceling statement due to statement timeout'),
      false,
    ],
    ["a lost connection after the app's cancel", own(userCancel()), prismaClosed(), false],
    [
      "a unique violation after the app's cancel",
      own(userCancel()),
      prisma('23505', 'duplicate key'),
      false,
    ],
    ['nothing met', undefined, prisma('57014', 'canceling statement due to user request'), false],
  ])('%s', (_name, met, error, expected) => {
    expect(answersSameAsked(met, error)).toBe(expected);
  });
});
