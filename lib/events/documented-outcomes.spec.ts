import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { KEY_OUTCOMES } from './event-outcomes.js';
import { IDEMPOTENCY_CHANNELS } from './idempotency-events.js';

/**
 * The outcomes the code emits, the lists that declare them, and the docs' tables of events
 * and metrics are one list: an outcome added to the code and not to the tables (or named in
 * the tables and never emitted) fails here, so that an alert written from the docs fires
 * on what it says.
 */
const root = process.cwd();

/** Every library source file, specs aside. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') && !entry.name.endsWith('.spec.ts') ? [path] : [];
  });
}

/** The channels named by `publish(...)` (and `publishAs(...)`) calls: every quoted name in their first argument. */
function publishedChannels(): string[] {
  const names = new Set<string>();
  for (const file of sources(join(root, 'lib'))) {
    for (const call of readFileSync(file, 'utf8').matchAll(/\bpublish(?:As)?\(\s*([^,]+),/g)) {
      for (const [, name] of call[1].matchAll(/'(\w+)'/g)) names.add(name);
    }
  }
  return [...names].sort();
}

/** The reference page of events and metrics. */
function readmeSection(): string {
  return readFileSync(join(root, 'docs', 'reference', 'events-and-metrics.md'), 'utf8');
}

describe('the outcomes the code emits', () => {
  it('are the channels IDEMPOTENCY_CHANNELS declares, each published somewhere', () => {
    expect(publishedChannels()).toEqual(Object.keys(IDEMPOTENCY_CHANNELS).sort());
  });

  it('each request outcome of the metrics is a channel', () => {
    for (const channel of Object.keys(KEY_OUTCOMES)) {
      expect(Object.keys(IDEMPOTENCY_CHANNELS)).toContain(channel);
    }
  });
});

describe('the tables of docs/reference/events-and-metrics.md', () => {
  it('list every event channel, by its id and its name, and no other', () => {
    const rows = [...readmeSection().matchAll(/^\| `(idempotency:[\w-]+)` \(`(\w+)`\) \|/gm)];
    const documented = rows.map(([, id, name]) => `${name} ${id}`).sort();
    const emitted = Object.entries(IDEMPOTENCY_CHANNELS)
      .map(([name, id]) => `${name} ${id}`)
      .sort();
    expect(documented).toEqual(emitted);
  });

  it('list every value of idempotency.outcome in the outcomes counter, and no other', () => {
    const row = /^\| `idempotency\.outcomes` \|[^|]*\| `idempotency\.outcome` \(([^)]*)\)/m.exec(
      readmeSection(),
    );
    expect(row).not.toBeNull();
    const documented = [...row![1].matchAll(/`(\w+)`/g)].map(([, value]) => value).sort();
    expect(documented).toEqual(Object.values(KEY_OUTCOMES).sort());
  });
});
