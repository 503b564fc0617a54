import { sqlReaderReady } from '../transaction/sql/sql-parse.js';
import {
  type ClientHeld,
  type ClientPlace,
  endsLeftOpen,
  endsWithCommit,
  heldView,
  placeOfClient,
  refusesCommitFrom,
  type StatementScope,
} from './client-place.js';

beforeAll(() => sqlReaderReady());

describe('heldView: what a view of a scope connection is (reviewer, round 107)', () => {
  it.each<[string, boolean, number, boolean, ClientHeld]>([
    ['used past its scope end', true, 0, true, 'view-apart'],
    ['apart, whatever its depth', true, 1, true, 'view-apart'],
    ['no transaction of its code, scope open', false, 0, false, 'view'],
    ['no transaction of its code, scope ended', false, 0, true, 'view'],
    ['BEGIN open, scope open', false, 1, false, 'view-in-transaction'],
    ['savepoints open, scope open', false, 3, false, 'view-in-transaction'],
    // Whatever the end: refused at its commit, the handler threw, the lease lost, a 503.
    ['BEGIN open, scope ended', false, 1, true, 'view-left-open'],
    ['savepoints open, scope ended', false, 2, true, 'view-left-open'],
  ])('%s', (_name, apart, depth, ended, held) => {
    expect(heldView(apart, depth, ended)).toBe(held);
  });
});

describe('endsLeftOpen: a ROLLBACK on a view whose transaction went with its scope (adversary 108)', () => {
  it.each<[ClientHeld, string | undefined, boolean]>([
    // `ROLLBACK` or `ABORT` (nestedControlOf's `rollback`) on a view left open: ends it there.
    ['view-left-open', 'rollback', true],
    // Anything else on it stays as placeOfClient says (refused in an open request).
    ['view-left-open', 'commit', false],
    ['view-left-open', 'begin', false],
    ['view-left-open', 'set-isolation', false],
    ['view-left-open', undefined, false],
    // Its transaction still there (scope open): the rollback is its nested transaction's.
    ['view-in-transaction', 'rollback', false],
    // Nothing of its code's open, or a connection of its own: as always.
    ['view', 'rollback', false],
    ['view-apart', 'rollback', false],
    ['connection', 'rollback', false],
    ['left', 'rollback', false],
  ])('%s, %s -> %s', (held, control, ends) => {
    expect(endsLeftOpen(held, control)).toBe(ends);
  });
});

describe('placeOfClient: where a statement on a client of the joined pool runs (adversary 103)', () => {
  it.each<[ClientHeld, StatementScope, ClientPlace]>([
    // A connection of its own taken outside every request (onModuleInit, a job, LISTEN).
    ['connection', 'none', 'own'],
    ['connection', 'open', 'refuse'],
    ['connection', 'ended', 'own'],
    ['connection', 'elsewhere', 'own'],
    // Taken in outside(): the app's own, wherever it is used.
    ['left', 'none', 'own'],
    ['left', 'open', 'own'],
    ['left', 'ended', 'own'],
    ['left', 'elsewhere', 'own'],
    // A view of a request's or phase's connection.
    ['view', 'home', 'own'],
    ['view', 'none', 'own'],
    ['view', 'open', 'join'],
    ['view', 'ended', 'join'],
    ['view', 'elsewhere', 'refuse'],
    // A view with a transaction of its code's open on it.
    ['view-in-transaction', 'home', 'own'],
    ['view-in-transaction', 'none', 'own'],
    ['view-in-transaction', 'open', 'own'],
    ['view-in-transaction', 'ended', 'own'],
    ['view-in-transaction', 'elsewhere', 'own'],
    // Such a view whose scope ended with that transaction open (a client kept across
    // requests, adversary 104): refused with a clear error in an open request.
    ['view-left-open', 'home', 'own'],
    ['view-left-open', 'none', 'own'],
    ['view-left-open', 'open', 'refuse'],
    ['view-left-open', 'ended', 'own'],
    ['view-left-open', 'elsewhere', 'own'],
    // A view past its scope's end, now a connection of its own.
    ['view-apart', 'home', 'own'],
    ['view-apart', 'none', 'own'],
    ['view-apart', 'open', 'refuse'],
    ['view-apart', 'ended', 'own'],
    ['view-apart', 'elsewhere', 'own'],
  ])('%s used from %s -> %s', (held, scope, place) => {
    expect(placeOfClient(held, scope)).toBe(place);
  });
});

describe('refusesCommitFrom: a COMMIT on a kept view with its transaction open, from elsewhere (adversary 104, 106)', () => {
  it.each<[ClientHeld, StatementScope, boolean]>([
    // The batch: BEGIN in A, COMMIT sent from any scope but A's: another open request (or
    // phase), a plain route or a timer (none), work another request left (ended), another
    // request's outside() or a route that is not atomic (elsewhere).
    ['view-in-transaction', 'open', true],
    ['view-in-transaction', 'none', true],
    ['view-in-transaction', 'ended', true],
    ['view-in-transaction', 'elsewhere', true],
    // From its own scope (its handler, work it left, its own outside()): its own transaction.
    ['view-in-transaction', 'home', false],
    // Views that join the sender, or are refused there anyway, or connections of their own.
    ['view', 'open', false],
    ['view', 'none', false],
    ['view-left-open', 'open', false],
    ['view-left-open', 'none', false],
    ['view-apart', 'none', false],
    ['connection', 'open', false],
    ['connection', 'none', false],
    ['left', 'elsewhere', false],
  ])('%s, from %s -> %s', (held, scope, refused) => {
    expect(refusesCommitFrom(held, scope)).toBe(refused);
  });
});

describe('endsWithCommit: the statements refused on such a view from elsewhere', () => {
  it.each<[unknown, boolean]>([
    ['COMMIT', true],
    ['commit', true],
    ['END', true],
    ['COMMIT AND CHAIN', true],
    ['END TRANSACTION', true],
    ["PREPARE TRANSACTION 'batch'", true],
    ['/* traced */ COMMIT', true],
    ['INSERT INTO audit VALUES (1); COMMIT', true],
    ['ROLLBACK', false],
    ['ABORT', false],
    ['BEGIN', false],
    ['SAVEPOINT a', false],
    ['RELEASE SAVEPOINT a', false],
    ["INSERT INTO audit (note) VALUES ('commit')", false],
    [undefined, false],
  ])('%s -> %s', (sql, commits) => {
    expect(endsWithCommit(sql)).toBe(commits);
  });
});
