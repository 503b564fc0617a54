import { type StoredResponse } from '../shapes/stored-response.js';

/** A finished key as this process last saw it: enough to decide and replay without a query. */
export interface CachedKey {
  fingerprint: Buffer;
  response: StoredResponse;
  /** When this process stops trusting the entry (its monotonic clock, `performance.now()`). */
  expiresAt: number;
  /** The memory it is counted for. */
  size: number;
}

/**
 * Finished keys this process stored or replayed, so that a retry that comes back to it is
 * answered without a round trip to PostgreSQL (the design's "cheap duplicate path").
 *
 * Safe because a finished key never changes: no statement touches a `done` row but the purge.
 * An entry is trusted for at most half of the key's remaining retention (and at most `ttlMs`),
 * so it expires before any instance may purge the key, and a key reused after its retention
 * is never answered from here. Bounded by entries and by bytes, least recently used first out.
 */
export class ReplayCache {
  private readonly entries = new Map<string, CachedKey>();
  private bytes = 0;

  constructor(
    private readonly maxEntries: number,
    private readonly maxBytes: number,
    private readonly ttlMs: number,
  ) {}

  get size(): number {
    return this.entries.size;
  }

  get(tenantId: string, key: string, now: number): CachedKey | undefined {
    const id = entryId(tenantId, key);
    const entry = this.entries.get(id);
    if (!entry) return undefined;
    if (entry.expiresAt <= now) {
      this.remove(id, entry);
      return undefined;
    }
    // Most recently used last: the first entries are the ones to evict.
    this.entries.delete(id);
    this.entries.set(id, entry);
    return entry;
  }

  /**
   * Keeps a finished key for `min(ttlMs, retentionLeftMs / 2)` from `now`. A response too large
   * for the cache, or a key with no retention left, is not kept.
   */
  set(
    tenantId: string,
    key: string,
    fingerprint: Buffer,
    response: StoredResponse,
    retentionLeftMs: number,
    now: number,
  ): void {
    if (this.maxEntries === 0) return;
    const lifetime = Math.min(this.ttlMs, Math.floor(retentionLeftMs / 2));
    const id = entryId(tenantId, key);
    const kept = ownCopy(response);
    const size = sizeOf(id, kept);
    if (lifetime <= 0 || size > this.maxBytes) return;
    const previous = this.entries.get(id);
    if (previous) this.remove(id, previous);
    this.entries.set(id, { fingerprint, response: kept, expiresAt: now + lifetime, size });
    this.bytes += size;
    for (const [oldest, entry] of this.entries) {
      if (this.entries.size <= this.maxEntries && this.bytes <= this.maxBytes) break;
      this.remove(oldest, entry);
    }
  }

  /** Forgets a key (the purge deleted it). */
  delete(tenantId: string, key: string): void {
    const id = entryId(tenantId, key);
    const entry = this.entries.get(id);
    if (entry) this.remove(id, entry);
  }

  private remove(id: string, entry: CachedKey): void {
    this.entries.delete(id);
    this.bytes -= entry.size;
  }
}

/**
 * How long a finished key is kept, as the replay cache must count it: the module's retention,
 * or the store's own when it expires its keys sooner (a Redis store's TTL). An entry counted
 * from the longer one would replay, from memory, a key the store had dropped, and answer 422
 * to its reuse with another request.
 */
export function keyRetentionMs(moduleRetentionMs: number, storeExpiresAfterMs?: number): number {
  return storeExpiresAfterMs === undefined
    ? moduleRetentionMs
    : Math.min(moduleRetentionMs, storeExpiresAfterMs);
}

/** Tenant ids are digits or text without a NUL, so the pair cannot collide. */
function entryId(tenantId: string, key: string): string {
  return `${tenantId}\u0000${key}`;
}

/**
 * The response in memory of its own: a body that is a view into a larger buffer (node's pool
 * slab, a buffer the app still holds) would keep all of it alive and could change under us;
 * header values are made strings, as the bytes counted are theirs.
 */
function ownCopy(response: StoredResponse): StoredResponse {
  const body = Buffer.allocUnsafeSlow(response.body.length);
  response.body.copy(body);
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(response.headers)) headers[name] = String(value);
  return { status: response.status, headers, body };
}

function sizeOf(key: string, response: StoredResponse): number {
  let size = key.length + 64 + response.body.length;
  for (const [name, value] of Object.entries(response.headers)) size += name.length + value.length;
  return size;
}
