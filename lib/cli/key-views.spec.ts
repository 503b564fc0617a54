import { type KeyRow } from './database.js';
import {
  formatKey,
  formatKeyList,
  keyStatus,
  noSuchKey,
  printable,
  releasedMessage,
  releaseVerdict,
} from './key-views.js';

const now = new Date('2026-12-01T12:00:00.000Z');
const minutes = (n: number) => new Date(now.getTime() + n * 60_000);
const key = (fields: Partial<KeyRow>): KeyRow => ({
  tenantId: 't1',
  key: 'k-1',
  state: 'started',
  recoveryPoint: 'start',
  phases: [],
  lockVersion: '0',
  claimId: '00000000-0000-4000-8000-000000000001',
  createdAt: minutes(-90),
  finishedAt: null,
  lockedUntil: minutes(30),
  responseCode: null,
  responseBytes: null,
  now,
  ...fields,
});

describe('keyStatus', () => {
  it.each<[string, Partial<KeyRow>, string]>([
    ['lease ahead', { lockedUntil: minutes(1) }, 'in flight'],
    ['lease ending now', { lockedUntil: now }, 'stuck'],
    ['lease expired', { lockedUntil: minutes(-1) }, 'stuck'],
    ['no lease: given back, waiting for its retry', { lockedUntil: null }, 'given back'],
    ['done', { state: 'done', lockedUntil: null }, 'finished'],
  ])('%s: %s', (_, fields, status) => {
    expect(keyStatus(key(fields))).toBe(status);
  });
});

describe('printable', () => {
  it.each([
    ['k-1', 'k-1'],
    ['order 42', '"order 42"'],
    ['tab\there', '"tab\\there"'],
    ['', '""'],
    ['café', '"café"'],
  ])('%j prints as %s', (text, shown) => {
    expect(printable(text)).toBe(shown);
  });
});

describe('formatKeyList', () => {
  it('aligns the columns, and counts', () => {
    const rows = [
      key({ key: 'a', recoveryPoint: 'charged', lockVersion: '2', lockedUntil: minutes(-61) }),
      key({ key: 'long key', lockedUntil: minutes(5) }),
    ];
    expect(formatKeyList(rows, 50)).toBe(
      [
        'STATUS     TENANT  KEY         PHASE    LOCK  AGE  LEASE',
        'stuck      t1      a           charged  2     1 h  expired 1 h ago',
        'in flight  t1      "long key"  start    0     1 h  ends in 5 min',
        '2 unfinished: 1 in flight, 1 stuck.',
        '',
      ].join('\n'),
    );
  });
  it.each<[KeyRow[], number, string]>([
    [[], 50, 'No unfinished keys.\n'],
    [[key({})], 1, '1 unfinished: 1 in flight, 0 stuck (the first 1: --limit shows more).\n'],
    [
      [key({}), key({ lockedUntil: null }), key({ lockedUntil: minutes(-1) })],
      50,
      '3 unfinished: 1 in flight, 1 stuck, 1 given back (waiting for their retry).\n',
    ],
  ])('%#: the tally', (rows, limit, last) => {
    expect(formatKeyList(rows, limit).endsWith(last)).toBe(true);
  });
});

describe('formatKey', () => {
  const done = key({
    state: 'done',
    recoveryPoint: 'finished',
    phases: ['charge', 'notify'],
    lockedUntil: null,
    finishedAt: minutes(-30),
    responseCode: 201,
    responseBytes: 13,
  });
  it('a finished key, its body left out', () => {
    expect(formatKey(done)).toBe(
      [
        'tenant:         t1',
        'key:            k-1',
        'status:         finished',
        'recovery point: finished',
        'phases:         charge, notify',
        'lease:          none',
        'lock version:   0',
        'claim id:       00000000-0000-4000-8000-000000000001',
        'created:        2026-12-01T10:30:00.000Z (1 h ago)',
        'finished:       2026-12-01T11:30:00.000Z (30 min ago)',
        'response:       201, 13 bytes stored (--body prints them)',
        '',
      ].join('\n'),
    );
  });
  it.each<[Buffer | null, Record<string, string> | null, string]>([
    [Buffer.from('{"id":"ch_1"}'), {}, '{"id":"ch_1"}'],
    [Buffer.from('{"id":"ch_1"}'), null, '{"id":"ch_1"}'],
    [null, null, '(no body stored)'],
    [
      Buffer.alloc(40),
      { $sealed: '1' },
      "(sealed with the app's encryption key: 40 bytes the command cannot read)",
    ],
    [
      Buffer.alloc(0),
      { 'content-type': 'text/csv', $body: '{"id":"b1"}' },
      '(stored apart in idempotency_response_bodies: {"id":"b1"})',
    ],
  ])('with the body asked for: %s %j', (body, headers, shown) => {
    expect(
      formatKey(done, { body, headers }).endsWith(
        `response:       201, 13 bytes stored\n${shown}\n`,
      ),
    ).toBe(true);
  });
  it('an unfinished key: its lease, no response line', () => {
    const text = formatKey(key({ lockedUntil: minutes(-120) }));
    expect(text).toContain('lease:          2026-12-01T10:00:00.000Z (expired 2 h ago)\n');
    expect(text).toContain('finished:       no\n');
    expect(text).not.toContain('response:');
  });
});

describe('noSuchKey', () => {
  it.each<[string, string, string[], string]>([
    ['t1', 'k', [], 'no such key'],
    [
      't1',
      'k',
      ['0'],
      'no such key under tenant t1; the key k is kept under tenant 0 (an app with globalKeys: ' +
        'true keeps its keys under tenant 0, which "" names too)',
    ],
    [
      'acme',
      'order 1',
      ['a b', 'beta'],
      'no such key under tenant acme; the key "order 1" is kept under tenants "a b", beta',
    ],
  ])('tenant %j, key %j, kept under %j', (tenant, key, elsewhere, message) => {
    expect(noSuchKey(tenant, key, elsewhere)).toBe(message);
  });
});

describe('releaseVerdict', () => {
  it.each<[string, KeyRow | undefined, ReturnType<typeof releaseVerdict>]>([
    ['no key', undefined, { release: false, reason: 'no such key' }],
    [
      'a finished key',
      key({ state: 'done', responseCode: 200 }),
      {
        release: false,
        reason: 'the key is finished (response 200): a finished key is never released',
      },
    ],
    ['a stuck key', key({ lockedUntil: minutes(-60) }), { release: true }],
    ['a key in flight', key({ lockedUntil: minutes(60) }), { release: true }],
  ])('%s', (_, row, verdict) => {
    expect(releaseVerdict(row)).toEqual(verdict);
  });
});

describe('releasedMessage', () => {
  it.each<[Partial<KeyRow>, string]>([
    [
      { lockedUntil: minutes(-60), recoveryPoint: 'charged', lockVersion: '3' },
      'Released t1 k-1 (lock version 3; its lease had expired 1 h ago): the next request with ' +
        'this key takes it over and resumes after "charged".\n',
    ],
    [
      { lockedUntil: minutes(9.5) },
      'Released t1 k-1 (lock version 0; its lease would have run another 9 min): the next ' +
        'request with this key takes it over and resumes after "start".\n',
    ],
  ])('%#', (fields, message) => {
    expect(releasedMessage(key(fields))).toBe(message);
  });
});
