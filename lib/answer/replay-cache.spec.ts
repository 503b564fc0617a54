import { keyRetentionMs, ReplayCache } from './replay-cache.js';

const fp = Buffer.alloc(32, 1);
const response = (bytes = 10) => ({ status: 201, headers: {}, body: Buffer.alloc(bytes) });

describe('ReplayCache', () => {
  it.each<[string, number, number, number | undefined]>([
    // [case, retention left, ms later, expected age limit]
    ['kept for the TTL when the retention is long', 86_400_000, 59_999, 60_000],
    ['gone after the TTL', 86_400_000, 60_000, undefined],
    ['kept for half of a short retention', 1_000, 499, 500],
    ['gone after half of a short retention', 1_000, 500, undefined],
    ['not kept when no retention is left', 0, 0, undefined],
  ])('%s', (_name, retentionLeft, later, lifetime) => {
    const cache = new ReplayCache(10, 1 << 20, 60_000);
    cache.set('1', 'k', fp, response(), retentionLeft, 1000);
    const hit = cache.get('1', 'k', 1000 + later);
    expect(hit?.expiresAt).toBe(lifetime === undefined ? undefined : 1000 + lifetime);
  });

  it('keeps keys of two tenants apart', () => {
    const cache = new ReplayCache(10, 1 << 20, 60_000);
    cache.set('1', 'k', fp, response(1), 10_000, 0);
    expect(cache.get('2', 'k', 1)).toBeUndefined();
    expect(cache.get('1', 'k', 1)?.response.body.length).toBe(1);
  });

  it('evicts the least recently used entry past its entry bound', () => {
    const cache = new ReplayCache(2, 1 << 20, 60_000);
    cache.set('1', 'a', fp, response(), 10_000, 0);
    cache.set('1', 'b', fp, response(), 10_000, 0);
    cache.get('1', 'a', 1); // a is now the most recent
    cache.set('1', 'c', fp, response(), 10_000, 0);
    expect(cache.get('1', 'b', 2)).toBeUndefined();
    expect(cache.get('1', 'a', 2)).toBeDefined();
    expect(cache.get('1', 'c', 2)).toBeDefined();
    expect(cache.size).toBe(2);
  });

  it('evicts past its byte bound and never keeps a body larger than it', () => {
    const cache = new ReplayCache(100, 1000, 60_000);
    cache.set('1', 'a', fp, response(600), 10_000, 0);
    cache.set('1', 'b', fp, response(600), 10_000, 0);
    expect(cache.get('1', 'a', 1)).toBeUndefined();
    expect(cache.get('1', 'b', 1)).toBeDefined();
    cache.set('1', 'huge', fp, response(5000), 10_000, 0);
    expect(cache.get('1', 'huge', 1)).toBeUndefined();
    expect(cache.get('1', 'b', 1)).toBeDefined();
  });

  it('forgets a purged key, and a size of 0 keeps nothing', () => {
    const cache = new ReplayCache(10, 1 << 20, 60_000);
    cache.set('1', 'k', fp, response(), 10_000, 0);
    cache.delete('1', 'k');
    expect(cache.get('1', 'k', 1)).toBeUndefined();
    const off = new ReplayCache(0, 1 << 20, 60_000);
    off.set('1', 'k', fp, response(), 10_000, 0);
    expect(off.size).toBe(0);
  });
});

describe('keyRetentionMs', () => {
  it.each<[string, number, number | undefined, number]>([
    // [case, module retention, the store's own expiry, what the cache counts from]
    ['a store that keeps keys for the module (PostgreSQL)', 86_400_000, undefined, 86_400_000],
    ['a store that drops them sooner (Redis, short TTL)', 86_400_000, 600, 600],
    [
      'a store that keeps them longer: the shorter still bounds the cache',
      1_000,
      86_400_000,
      1_000,
    ],
    ['the same retention', 5_000, 5_000, 5_000],
  ])('%s', (_name, moduleRetention, storeExpiry, expected) => {
    expect(keyRetentionMs(moduleRetention, storeExpiry)).toBe(expected);
  });
});
