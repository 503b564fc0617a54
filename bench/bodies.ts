/**
 * `npm run bench:bodies`: large responses inline against by pointer (`largeResponses`), on
 * the same machine in one run. For bodies of 1 KB, 100 KB and 1 MB it stores the same number
 * of finished keys each way, then reports the keys table's size per key (heap, TOAST and
 * indexes apart), the side table's, and the throughput of replays read from PostgreSQL
 * through the store (16 concurrent readers, the replay cache not involved), in alternating
 * rounds, as medians.
 */
import { randomBytes } from 'node:crypto';
import { type DataSource } from 'typeorm';
import { type ClaimStore } from '../lib/shapes/claim-store.interface.js';
import { PointingClaimStore } from '../lib/answer/bodies/pointing-claim.store.js';
import { PostgresBodyStore } from '../lib/answer/bodies/postgres-body.store.js';
import { IdempotencyDatabase } from '../lib/data-layers/idempotency-database.js';
import { PostgresClaimStore } from '../lib/claim/postgres-claim.store.js';
import {
  createMigratedDatabase,
  type MigratedDatabase,
} from '../test/support/migrated-database.js';
import { startEmbeddedPostgres } from '../sample-app/database/embedded-postgres.js';

const SIZES: [string, number, number][] = [
  ['1 KB', 1024, 4000],
  ['100 KB', 100 * 1024, 1000],
  ['1 MB', 1024 * 1024, 200],
];
const SECONDS = Number(process.env.BENCH_SECONDS ?? 3);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const READERS = 16;
const fp = Buffer.alloc(32, 7);

interface Variant {
  name: 'inline' | 'pointer';
  database: MigratedDatabase;
  store: ClaimStore;
  keys: string[];
}

async function variant(name: Variant['name'], label: string): Promise<Variant> {
  const database = await createMigratedDatabase(`bench_bodies_${name}_${label}`);
  const db = new IdempotencyDatabase(() => database.dataSource, 30_000);
  const plain = new PostgresClaimStore(db);
  const store =
    name === 'pointer' ? new PointingClaimStore(plain, new PostgresBodyStore(db), 512) : plain;
  return { name, database, store, keys: [] };
}

async function fill(v: Variant, size: number, count: number): Promise<void> {
  const body = Buffer.from(randomBytes(size / 2).toString('hex'));
  const response = { status: 201, headers: { 'content-type': 'application/json' }, body };
  for (let i = 0; i < count; i += 8) {
    await Promise.all(
      Array.from({ length: Math.min(8, count - i) }, async (_, j) => {
        const key = `k-${i + j}`;
        const outcome = await v.store.claim({ tenantId: '1', key }, fp, 60_000);
        if (outcome.kind !== 'claimed') throw new Error('expected a new key');
        if (!(await v.store.finish(outcome.claim, response))) throw new Error('finish failed');
        v.keys.push(key);
      }),
    );
  }
  await v.database.dataSource.query('VACUUM ANALYZE');
}

async function sizes(dataSource: DataSource, count: number) {
  const [row] = (await dataSource.query(`SELECT
    pg_relation_size('idempotency_keys') AS heap,
    pg_total_relation_size('idempotency_keys') - pg_relation_size('idempotency_keys')
      - pg_indexes_size('idempotency_keys') AS toast,
    pg_indexes_size('idempotency_keys') AS indexes,
    pg_total_relation_size('idempotency_response_bodies') AS bodies`)) as Record<string, string>[];
  const per = (bytes: string) => Math.round(Number(bytes) / count);
  return {
    heap: per(row.heap),
    toast: per(row.toast),
    indexes: per(row.indexes),
    bodies: per(row.bodies),
  };
}

async function replays(v: Variant): Promise<number> {
  let done = 0;
  const until = performance.now() + SECONDS * 1000;
  await Promise.all(
    Array.from({ length: READERS }, async (_, reader) => {
      let i = reader;
      while (performance.now() < until) {
        const key = v.keys[i++ % v.keys.length];
        const outcome = await v.store.claim({ tenantId: '1', key }, fp, 60_000);
        if (outcome.kind !== 'existing' || outcome.existing.state !== 'done') {
          throw new Error('expected a finished key');
        }
        done++;
      }
    }),
  );
  return done / SECONDS;
}

const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];
const kb = (bytes: number) => (bytes >= 1024 ? `${(bytes / 1024).toFixed(1)} KB` : `${bytes} B`);

async function main() {
  let stop: (() => Promise<void>) | undefined;
  if (!process.env.TEST_DATABASE_URL) {
    const embedded = await startEmbeddedPostgres();
    process.env.TEST_DATABASE_URL = embedded.url;
    stop = () => embedded.stop();
  }
  const out = [
    '| body | stored | keys | heap / key | TOAST / key | indexes / key | side table / key | replays/s | ÷ inline |',
    '| --- | --- | --- | --- | --- | --- | --- | --- | --- |',
  ];
  for (const [label, size, count] of SIZES) {
    const variants = [await variant('inline', label), await variant('pointer', label)];
    for (const v of variants) await fill(v, size, count);
    const rates = new Map<string, number[]>(variants.map((v) => [v.name, []]));
    for (const v of variants) await replays(v); // warm-up
    for (let round = 0; round < ROUNDS; round++) {
      for (const v of variants) rates.get(v.name)!.push(await replays(v));
    }
    const inline = median(rates.get('inline')!);
    for (const v of variants) {
      const s = await sizes(v.database.dataSource, count);
      const rate = median(rates.get(v.name)!);
      out.push(
        `| ${label} | ${v.name} | ${count} | ${kb(s.heap)} | ${kb(s.toast)} | ${kb(s.indexes)} | ${kb(s.bodies)} | ${Math.round(rate)} | ${(rate / inline).toFixed(2)} |`,
      );
      await v.database.drop();
    }
    console.log(out.slice(-2).join('\n'));
  }
  console.log(`\n${out.join('\n')}`);
  await stop?.();
}

await main();
