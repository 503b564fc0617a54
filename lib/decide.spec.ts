import { decide, type Decision, type ExistingKey, leaseOf } from './decide.js';

const fp = Buffer.alloc(32, 1);
const other = Buffer.alloc(32, 2);
const response = {
  status: 201,
  headers: { 'content-type': 'application/json' },
  body: Buffer.from('{}'),
};

const started = (leaseExpired: boolean, leaseSecondsLeft = 30): ExistingKey => ({
  state: 'started',
  fingerprint: fp,
  leaseExpired,
  leaseSecondsLeft,
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
      'live lease, same request: 409',
      started(false),
      fp,
      { kind: 'in-progress', retryAfterSeconds: 30 },
    ],
    ['live lease, other request: 422', started(false), other, { kind: 'mismatch' }],
    [
      'expired lease, same request: take over',
      started(true),
      fp,
      { kind: 'take-over', fence: { lockVersion: '3', claimId: 'c-1' } },
    ],
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
