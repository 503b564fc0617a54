import { type StoredResponse } from '../shapes/stored-response.js';
import { replayed } from './replay.js';

describe('replayed (a stored response as it goes out again)', () => {
  it.each<[string, StoredResponse, Record<string, string>]>([
    [
      'a JSON answer',
      { status: 201, headers: { 'content-type': 'application/json' }, body: Buffer.from('{}') },
      { 'content-type': 'application/json', 'idempotent-replayed': 'true' },
    ],
    [
      'a stored error with its Retry-After',
      { status: 503, headers: { 'retry-after': '1' }, body: Buffer.from('x') },
      { 'retry-after': '1', 'idempotent-replayed': 'true' },
    ],
    [
      'no headers',
      { status: 204, headers: {}, body: Buffer.alloc(0) },
      { 'idempotent-replayed': 'true' },
    ],
  ])('%s: same status and bytes, marked as replayed', (_name, stored, headers) => {
    const out = replayed(stored);
    expect(out.status).toBe(stored.status);
    expect(out.body.equals(stored.body)).toBe(true);
    expect(out.headers).toEqual(headers);
  });
});
