import {
  conflictRetryAfterSeconds,
  decide,
  type Decision,
  type ExistingKey,
  leaseOf,
} from './decide.js';

const fp = Buffer.alloc(32, 1);
const other = Buffer.alloc(32, 2);
const response = {
  status: 201,
  headers: { 'content-type': 'application/json' },
  body: Buffer.from('{}'),
};

const started = (
  leaseExpired: boolean,
  leaseSecondsLeft = 30,
  released?: boolean,
): ExistingKey => ({
  state: 'started',
  fingerprint: fp,
  leaseExpired,
  leaseSecondsLeft,
  released,
  fence: { lockVersion: '3', claimId: 'c-1' },
});
const done: ExistingKey = { state: 'done', fingerprint: fp, response };
const withFingerprint = (row: ExistingKey, fingerprint: Buffer): ExistingKey => ({
  ...row,
  fingerprint,
});

describe('decide', () => {
  it.each<[string, ExistingKey, Buffer, Decision]>([
    ['done, same request: replay', done, fp, { kind: 'replay', response }],
    ['done, other request: 422', done, other, { kind: 'mismatch' }],
    [
      'live lease, same request: 409, back in 1 s (not the 30 s left)',
      started(false),
      fp,
      { kind: 'in-progress', retryAfterSeconds: 1 },
    ],
    ['live lease, other request: 422', started(false), other, { kind: 'mismatch' }],
    [
      'expired lease, same request: take over',
      started(true),
      fp,
      { kind: 'take-over', fence: { lockVersion: '3', claimId: 'c-1' }, resumes: false },
    ],
    [
      'a key given back by its owner, same request: resume it',
      started(true, 0, true),
      fp,
      { kind: 'take-over', fence: { lockVersion: '3', claimId: 'c-1' }, resumes: true },
    ],
    [
      'expired, the store cannot tell a release: take over',
      started(true, 0, undefined),
      fp,
      { kind: 'take-over', fence: { lockVersion: '3', claimId: 'c-1' }, resumes: false },
    ],
    ['a key given back, other request: 422', started(true, 0, true), other, { kind: 'mismatch' }],
    ['expired lease, other request: 422', started(true), other, { kind: 'mismatch' }],
    [
      'lease ending now: retry after at least 1 s',
      started(false, 0),
      fp,
      { kind: 'in-progress', retryAfterSeconds: 1 },
    ],
    [
      'fingerprint of another length: 422',
      withFingerprint(done, Buffer.alloc(31, 1)),
      fp,
      { kind: 'mismatch' },
    ],
  ])('%s', (_name, existing, fingerprint, expected) => {
    expect(decide(existing, fingerprint)).toEqual(expected);
  });

  it("answers a live lease with the route's conflictRetryAfterSeconds", () => {
    expect(decide(started(false, 30), fp, 5)).toEqual({
      kind: 'in-progress',
      retryAfterSeconds: 5,
    });
  });
});

describe('conflictRetryAfterSeconds', () => {
  it.each<[string, number, number, number]>([
    ['the default second, with a minute of lease left', 60, 1, 1],
    ['the default second, with 5 s left', 5, 1, 1],
    ['a route that says 5, with 60 s left', 60, 5, 5],
    ['a route that says 10, capped by the 3 s left', 3, 10, 3],
    ['the lease ending now: still at least 1 s', 0, 1, 1],
    ['a route that says 10 and the lease ending now: 1 s', 0, 10, 1],
  ])('%s', (_what, leaseSecondsLeft, configured, expected) => {
    expect(conflictRetryAfterSeconds(leaseSecondsLeft, configured)).toBe(expected);
  });
});

describe('leaseOf', () => {
  it.each<[string, number, number, boolean, number]>([
    ['ends in 30 s', 31_000, 1_000, false, 30],
    ['ends in 1 ms: a whole second to wait', 1_001, 1_000, false, 1],
    ['ends this very millisecond: not yet expired', 1_000, 1_000, false, 0],
    ['ended 1 ms ago', 999, 1_000, true, 0],
    ['ended long ago', 0, 60_000, true, 0],
  ])('%s', (_what, lockedUntilMs, nowMs, leaseExpired, leaseSecondsLeft) => {
    expect(leaseOf(lockedUntilMs, nowMs)).toEqual({ leaseExpired, leaseSecondsLeft });
  });
});
