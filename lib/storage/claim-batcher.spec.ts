import { IdempotencyStoreUnavailableError } from '../idempotency.errors.js';
import { mayBeOneRows, takeBatch } from './claim-batcher.js';

const waiting = (tenantId: string, key: string) => ({
  request: { scope: { tenantId, key }, fingerprint: Buffer.alloc(0), leaseMs: 1 },
});
const ids = (list: ReturnType<typeof waiting>[]) =>
  list.map((w) => `${w.request.scope.tenantId}/${w.request.scope.key}`);

describe('takeBatch', () => {
  it.each([
    ['all of a short queue, sorted', ['1/b', '1/a', '2/a'], 10, ['1/a', '1/b', '2/a'], []],
    [
      'up to the most, in their order of arrival',
      ['1/c', '1/b', '1/a'],
      2,
      ['1/b', '1/c'],
      ['1/a'],
    ],
    [
      'a key once, its second claim left for the next',
      ['1/a', '1/b', '1/a'],
      10,
      ['1/a', '1/b'],
      ['1/a'],
    ],
    ['the same key of two tenants apart', ['1/a', '2/a'], 10, ['1/a', '2/a'], []],
    [
      'tenant "ab" with key "c" apart from "a" with "bc"',
      ['ab/c', 'a/bc'],
      10,
      ['a/bc', 'ab/c'],
      [],
    ],
  ])('takes %s', (_, queued, max, batch, left) => {
    const queue = queued.map((id) => waiting(...(id.split('/') as [string, string])));
    expect(ids(takeBatch(queue, max))).toEqual(batch);
    expect(ids(queue)).toEqual(left);
  });
});

describe('mayBeOneRows', () => {
  const unavailable = (code?: string) => new IdempotencyStoreUnavailableError({ code });
  it.each([
    ['a check violation', unavailable('23514'), true],
    ['a value out of range', unavailable('22003'), true],
    ['a deadlock', unavailable('40P01'), true],
    ['a cancelled statement (the deadline)', unavailable('57014'), false],
    ['a lost connection', unavailable('08006'), false],
    ['a missing table', unavailable('42P01'), false],
    ['an error without a SQLSTATE', unavailable(), false],
  ])('%s: %s', (_, error, expected) => {
    expect(mayBeOneRows(error)).toBe(expected);
  });
});
