import {
  answerAwaitsTaker,
  type ClientHeld,
  type ClientPlace,
  placeOfClient,
  type StatementScope,
} from './client-place.js';

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

describe('answerAwaitsTaker: a COMMIT on a kept view makes the sender wait for the taker (adversary 104)', () => {
  type Control = 'begin' | 'commit' | 'rollback' | undefined;
  it.each<[ClientHeld, StatementScope, Control, boolean]>([
    // The batch: BEGIN in A, COMMIT sent from B while A is open.
    ['view-in-transaction', 'open', 'commit', true],
    // Its other statements may come from any request's context (Prisma's dispatch): no wait.
    ['view-in-transaction', 'open', undefined, false],
    ['view-in-transaction', 'open', 'begin', false],
    // A ROLLBACK leaves nothing of the sender's.
    ['view-in-transaction', 'open', 'rollback', false],
    // Sent from its own scope, or from none, or past the sender's end: nothing to wait in.
    ['view-in-transaction', 'home', 'commit', false],
    ['view-in-transaction', 'none', 'commit', false],
    ['view-in-transaction', 'ended', 'commit', false],
    ['view-in-transaction', 'elsewhere', 'commit', false],
    // Views that join the sender, or are refused there, or connections of their own.
    ['view', 'open', 'commit', false],
    ['view-left-open', 'open', 'commit', false],
    ['view-apart', 'open', 'commit', false],
    ['connection', 'open', 'commit', false],
    ['left', 'open', 'commit', false],
  ])('%s, %s from %s -> %s', (held, scope, control, waits) => {
    expect(answerAwaitsTaker(held, scope, control)).toBe(waits);
  });
});
