import {
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
