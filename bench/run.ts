/**
 * `npm run bench`: the library's cost, measured as ratios in one run on one machine.
 *
 * 1. The one-insert endpoint, on each adapter and for two kinds of work (a raw INSERT and a
 *    TypeORM save): the plain route; `@Idempotent()` on the atomic default (new keys and
 *    replays); the same with `atomic: false` (two commits); the same keys in our Redis claim
 *    store (`atomic: false`, new keys and replays); and the competitor,
 *    `@node-idempotency/nestjs` on Redis (new keys and replays), installed in
 *    `bench/competitor/` on first use.
 * 1b. The same one insert on Prisma 7 (`BENCH_PARTS=prisma`): the plain route against
 *    `@Idempotent()`, Prisma built on the pg.Pool the library is handed.
 * 1c. The same one-insert work on Drizzle (`bench/drizzle-bench-app.ts`: the library and Drizzle
 *    on one pg.Pool, no TypeORM), on each adapter: the plain route, and `@Idempotent()` with
 *    new keys and replays.
 * 2. The sample app's `POST /charges` (claim, a phase, the PSP call, finish) against the
 *    fake PSP answering in 0 ms (16 connections: new keys and replays) and in 200 ms (64
 *    connections: new keys), for this build and, with `BENCH_BASELINE_REF=<git ref>`, for a
 *    build of that ref side by side; and the same route written with the competitor
 *    (`bench/competitor-charges-app.ts`, 0 ms: new keys and replays).
 *
 * `BENCH_WORK=raw` (or `orm`) and `BENCH_ADAPTERS=fastify` (or `express`) narrow part 1, and
 * `BENCH_VARIANTS=new keys (atomic)` its variants (by a part of their names); with
 * `BENCH_BASELINE_REF` part 1 also measures that ref's plain route and new keys, in the same rounds;
 * `BENCH_CONNECTIONS=16,64` runs it at each number of connections (32 by default; parts 1b and
 * 1c at the first).
 *
 * Every variant is run in interleaved rounds (so the noise of a shared machine falls on each
 * alike) and reported as medians: requests per second, p50 and p99 latency, and the app
 * process's CPU time per request, read from /proc.
 */
import autocannon from 'autocannon';
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { Client, Pool } from 'pg';
import { migrate } from '../examples/prisma-orders/database/migrate.js';
import { createTestDatabase, type TestDatabase } from '../test/support/database.js';
import { startWorker, type WorkerProcess } from '../test/support/worker-process.js';
import { freePort, startEmbeddedPostgres } from '../sample-app/database/embedded-postgres.js';

const DURATION_S = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
/** The one-insert part's connections: `BENCH_CONNECTIONS=16,64` runs it at each. */
const CONNECTIONS = (process.env.BENCH_CONNECTIONS ?? '32').split(',').map(Number);
const REDIS_URL = process.env.BENCH_REDIS_URL ?? 'redis://127.0.0.1:6379';
const ROOT = process.cwd();
/** Clock ticks per second of /proc's CPU times (USER_HZ, 100 on Linux). */
const TICKS = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

interface Sample {
  rps: number;
  p50: number;
  p99: number;
  cpuMs: number;
  failures: number;
}

interface Variant {
  name: string;
  app: WorkerProcess;
  path: string;
  connections: number;
  headers: (i: number) => Record<string, string>;
  body: string;
}

/** User and system CPU time of a process so far, in milliseconds. */
function cpuMs(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS;
}

async function measure(variant: Variant): Promise<Sample> {
  let i = 0;
  const before = cpuMs(variant.app.child.pid!);
  const result = await new Promise<autocannon.Result>((resolve, reject) => {
    autocannon(
      {
        url: variant.app.url,
        connections: variant.connections,
        duration: DURATION_S,
        requests: [
          {
            method: 'POST',
            path: variant.path,
            setupRequest: (request) => {
              request.headers = { 'content-type': 'application/json', ...variant.headers(i++) };
              request.body = variant.body;
              return request;
            },
          },
        ],
      },
      (error, res) => (error ? reject(error) : resolve(res)),
    );
  });
  const used = cpuMs(variant.app.child.pid!) - before;
  return {
    rps: result.requests.average,
    p50: result.latency.p50,
    p99: result.latency.p99,
    cpuMs: used / Math.max(1, result.requests.total),
    failures: result.errors + result.non2xx + result.timeouts,
  };
}

const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

/** Runs every variant once per round, in turn; returns the medians by name. */
async function rounds(variants: Variant[]): Promise<Map<string, Sample>> {
  const samples = new Map<string, Sample[]>(variants.map((v) => [v.name, []]));
  for (const variant of variants) await measure({ ...variant, name: 'warm-up' });
  for (let round = 0; round < ROUNDS; round++) {
    for (const variant of variants) samples.get(variant.name)!.push(await measure(variant));
  }
  const out = new Map<string, Sample>();
  for (const [name, list] of samples) {
    out.set(name, {
      rps: median(list.map((s) => s.rps)),
      p50: median(list.map((s) => s.p50)),
      p99: median(list.map((s) => s.p99)),
      cpuMs: median(list.map((s) => s.cpuMs)),
      failures: list.reduce((sum, s) => sum + s.failures, 0),
    });
  }
  return out;
}

const row = (name: string, s: Sample, base: Sample) =>
  `| ${name} | ${s.rps.toFixed(0)} | ${(s.rps / base.rps).toFixed(2)} | ${s.p50} | ${s.p99} | ${s.cpuMs.toFixed(2)} | ${s.failures} |`;
const HEADER =
  '| variant | req/s | ÷ baseline | p50 ms | p99 ms | app CPU ms/req | errors, non-2xx |\n| --- | --- | --- | --- | --- | --- | --- |';

/**
 * `BENCH_VARIANTS=plain,new keys`: only the variants whose names contain one of these (the
 * plain route is always kept, as every ratio is taken against it).
 */
function selected(variants: Variant[]): Variant[] {
  const wanted = process.env.BENCH_VARIANTS?.split(',');
  if (!wanted) return variants;
  return variants.filter((v) => v.name === 'plain route' || wanted.some((w) => v.name.includes(w)));
}

/** Posts each key once, so that the replay variants find them done. */
async function prepare(
  app: WorkerProcess,
  path: string,
  keys: string[],
  headers: object,
  body: string,
) {
  for (const key of keys) {
    await fetch(`${app.url}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key, ...headers },
      body,
    });
  }
}

function ensureCompetitor(): void {
  const dir = join(ROOT, 'bench', 'competitor');
  if (existsSync(join(dir, 'node_modules', '@node-idempotency', 'nestjs'))) return;
  execFileSync('npm', ['ci', '--legacy-peer-deps', '--no-audit', '--no-fund'], {
    cwd: dir,
    stdio: 'inherit',
  });
}

async function oneInsert(out: string[]): Promise<void> {
  ensureCompetitor();
  const body = JSON.stringify({ amount: 1999, customer: 'cus_bench' });
  for (const adapter of (process.env.BENCH_ADAPTERS ?? 'express,fastify').split(',')) {
    const database = await createTestDatabase(`bench_${adapter}`);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(
      'CREATE TABLE bench_orders (id bigserial PRIMARY KEY, amount int, customer text, created_at timestamptz DEFAULT now())',
    );
    const app = await startWorker('bench/bench-app.js', {
      DATABASE_URL: database.url,
      HTTP_ADAPTER: adapter,
      PORT: '0',
      COMPETITOR_REDIS_URL: REDIS_URL,
    });
    const uncached = await startWorker('bench/bench-app.js', {
      DATABASE_URL: database.url,
      HTTP_ADAPTER: adapter,
      PORT: '0',
      REPLAY_CACHE_SIZE: '0',
      COMPETITOR_REDIS_URL: REDIS_URL,
    });
    // BENCH_BASELINE_REF: the same bench app built from that ref, on the same database, for
    // its plain route and its new keys, measured in the same rounds as this build's.
    const ref = process.env.BENCH_BASELINE_REF;
    const baseline = ref
      ? await startWorker(join(baselineBuild(ref), 'bench', 'bench-app.js'), {
          DATABASE_URL: database.url,
          HTTP_ADAPTER: adapter,
          PORT: '0',
          COMPETITOR_REDIS_URL: REDIS_URL,
        })
      : undefined;
    const works = [
      ['raw INSERT', '', 'raw'],
      ['TypeORM save', '-orm', 'orm'],
    ].filter(([, , short]) => (process.env.BENCH_WORK ?? 'raw,orm').split(',').includes(short));
    for (const [work, suffix] of works) {
      const ours = Array.from(
        { length: 64 },
        (_, i) => `ours${suffix}-${adapter}-${i}-${Date.now()}`,
      );
      const theirs = Array.from(
        { length: 64 },
        (_, i) => `theirs${suffix}-${adapter}-${i}-${Date.now()}`,
      );
      await prepare(app, `/idempotent${suffix}`, ours, {}, body);
      await prepare(app, `/competitor${suffix}`, theirs, {}, body);
      const onRedis = ours.map((key) => `redis-${key}`);
      await prepare(uncached, `/redis${suffix}`, onRedis, {}, body);
      const fresh = (prefix: string) => (i: number) => ({
        'idempotency-key': `${prefix}-${i}-${Math.random()}`,
      });
      const replay = (keys: string[]) => (i: number) => ({
        'idempotency-key': keys[i % keys.length],
      });
      for (const connections of CONNECTIONS) {
        const base = { app, connections, body };
        const baselineVariants: Variant[] = baseline
          ? [
              {
                ...base,
                app: baseline,
                name: `baseline ${ref}: plain route`,
                path: `/plain${suffix}`,
                headers: () => ({}),
              },
              {
                ...base,
                app: baseline,
                name: `baseline ${ref}: new keys (atomic)`,
                path: `/idempotent${suffix}`,
                headers: fresh('b'),
              },
            ]
          : [];
        const results = await rounds(
          selected([
            { ...base, name: 'plain route', path: `/plain${suffix}`, headers: () => ({}) },
            {
              ...base,
              name: 'ours, new keys (atomic)',
              path: `/idempotent${suffix}`,
              headers: fresh('n'),
            },
            { ...base, name: 'ours, replays', path: `/idempotent${suffix}`, headers: replay(ours) },
            ...(suffix
              ? []
              : [
                  {
                    ...base,
                    name: 'the design by hand (its floor), new keys',
                    path: '/floor',
                    headers: fresh('f'),
                  },
                  {
                    ...base,
                    name: 'ours, new keys (oneCommit)',
                    path: '/one-commit',
                    headers: fresh('o'),
                  },
                  {
                    ...base,
                    name: 'the one-commit design by hand (its floor), new keys',
                    path: '/floor-one',
                    headers: fresh('g'),
                  },
                ]),
            {
              ...base,
              app: uncached,
              name: 'ours, replays from PostgreSQL (no replay cache)',
              path: `/idempotent${suffix}`,
              headers: replay(ours),
            },
            {
              ...base,
              name: 'ours, new keys (atomic: false)',
              path: `/split${suffix}`,
              headers: fresh('s'),
            },
            {
              ...base,
              app: uncached,
              name: 'ours on Redis (atomic: false), new keys',
              path: `/redis${suffix}`,
              headers: fresh('r'),
            },
            {
              ...base,
              app: uncached,
              name: 'ours on Redis, replays (no replay cache)',
              path: `/redis${suffix}`,
              headers: replay(onRedis),
            },
            {
              ...base,
              name: 'competitor on Redis, new keys',
              path: `/competitor${suffix}`,
              headers: fresh('c'),
            },
            {
              ...base,
              name: 'competitor on Redis, replays',
              path: `/competitor${suffix}`,
              headers: replay(theirs),
            },
            ...baselineVariants,
          ]),
        );
        const plain = results.get('plain route')!;
        out.push(
          `\n**${adapter}, ${work}** (${connections} connections; ÷ the plain route)\n\n${HEADER}`,
        );
        for (const [name, sample] of results) out.push(row(name, sample, plain));
        console.log(out.slice(-(results.size + 1)).join('\n'));
      }
    }
    await app.kill('SIGTERM');
    await uncached.kill('SIGTERM');
    await baseline?.kill('SIGTERM');
    await db.end();
    await database.drop();
  }
}

/**
 * The one-insert work on Prisma (bench/prisma-bench-app.ts, Express): the plain route against
 * `@Idempotent()` with new keys and with replays, Prisma and the library on one pg.Pool.
 */
async function prismaInsert(out: string[]): Promise<void> {
  const database = await createTestDatabase('bench_prisma');
  const pool = new Pool({ connectionString: database.url, max: 1 });
  await migrate(pool);
  await pool.end();
  const app = await startWorker('bench/prisma-bench-app.js', {
    DATABASE_URL: database.url,
    HTTP_ADAPTER: 'express',
    PORT: '0',
  });
  const body = JSON.stringify({ sku: 'sku-bench', quantity: 1 });
  const keys = Array.from({ length: 64 }, (_, i) => `prisma-${i}-${Date.now()}`);
  await prepare(app, '/idempotent-prisma', keys, {}, body);
  const base = { app, connections: CONNECTIONS[0], body };
  const results = await rounds([
    { ...base, name: 'plain route', path: '/plain-prisma', headers: () => ({}) },
    {
      ...base,
      name: 'ours, new keys (atomic)',
      path: '/idempotent-prisma',
      headers: (i) => ({ 'idempotency-key': `p-${i}-${Math.random()}` }),
    },
    {
      ...base,
      name: 'ours, replays',
      path: '/idempotent-prisma',
      headers: (i) => ({ 'idempotency-key': keys[i % keys.length] }),
    },
  ]);
  const plain = results.get('plain route')!;
  out.push(
    `\n**express, Prisma create** (${CONNECTIONS[0]} connections; ÷ the plain route)\n\n${HEADER}`,
  );
  for (const [name, sample] of results) out.push(row(name, sample, plain));
  console.log(out.slice(-5).join('\n'));
  await app.kill('SIGTERM');
  await database.drop();
}

/** The one-insert work on Drizzle: the plain route against `@Idempotent()`, per adapter. */
async function drizzleOneInsert(out: string[]): Promise<void> {
  const body = JSON.stringify({ amount: 1999, customer: 'cus_bench' });
  for (const adapter of ['express', 'fastify']) {
    const database = await createTestDatabase(`bench_drizzle_${adapter}`);
    const db = new Client({ connectionString: database.url });
    await db.connect();
    await db.query(readFileSync(join(ROOT, 'migrations', 'schema.sql'), 'utf8'));
    await db.query(
      'CREATE TABLE bench_orders (id bigserial PRIMARY KEY, amount int, customer text, created_at timestamptz DEFAULT now())',
    );
    const app = await startWorker('bench/drizzle-bench-app.js', {
      DATABASE_URL: database.url,
      HTTP_ADAPTER: adapter,
      PORT: '0',
    });
    const keys = Array.from({ length: 64 }, (_, i) => `drizzle-${adapter}-${i}-${Date.now()}`);
    await prepare(app, '/idempotent-drizzle', keys, {}, body);
    const base = { app, connections: CONNECTIONS[0], body };
    const results = await rounds([
      { ...base, name: 'plain route', path: '/plain-drizzle', headers: () => ({}) },
      {
        ...base,
        name: 'ours, new keys (atomic)',
        path: '/idempotent-drizzle',
        headers: (i) => ({ 'idempotency-key': `d-${i}-${Math.random()}` }),
      },
      {
        ...base,
        name: 'ours, replays',
        path: '/idempotent-drizzle',
        headers: (i) => ({ 'idempotency-key': keys[i % keys.length] }),
      },
    ]);
    const plain = results.get('plain route')!;
    out.push(
      `\n**${adapter}, Drizzle insert** (${CONNECTIONS[0]} connections; ÷ the plain route)\n\n${HEADER}`,
    );
    for (const [name, sample] of results) out.push(row(name, sample, plain));
    console.log(out.slice(-5).join('\n'));
    await app.kill('SIGTERM');
    await db.end();
    await database.drop();
  }
}

/**
 * A build of `ref` in a worktree of its own, sharing this checkout's node_modules: its whole
 * tsconfig.json (the sample app and the bench apps). Returns the build's dist/ folder.
 */
function baselineBuild(ref: string): string {
  const dir = join('/tmp', `idempotency-bench-${ref.replace(/[^\w.-]/g, '_')}`);
  if (!existsSync(join(dir, 'dist', 'bench', 'bench-app.js'))) {
    if (!existsSync(dir))
      execFileSync('git', ['worktree', 'add', '--detach', dir, ref], { cwd: ROOT });
    if (!existsSync(join(dir, 'node_modules')))
      symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'));
    const competitor = join('bench', 'competitor', 'node_modules');
    if (existsSync(join(ROOT, competitor)) && !existsSync(join(dir, competitor)))
      symlinkSync(join(ROOT, competitor), join(dir, competitor));
    if (existsSync(join(dir, 'scripts', 'prisma-generate.mjs')))
      execFileSync('node', ['scripts/prisma-generate.mjs'], { cwd: dir, stdio: 'inherit' });
    execFileSync(join(ROOT, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json'], {
      cwd: dir,
      stdio: 'inherit',
    });
  }
  return join(dir, 'dist');
}

async function sampleFlow(out: string[]): Promise<void> {
  const builds: [string, string][] = [['this build', join(ROOT, 'dist', 'sample-app', 'main.js')]];
  const ref = process.env.BENCH_BASELINE_REF;
  if (ref) builds.push([`baseline ${ref}`, join(baselineBuild(ref), 'sample-app', 'main.js')]);
  const psp0 = await startWorker('sample-app/psp/main.js', { PSP_PORT: '0', PSP_DELAY_MS: '0' });
  const psp200 = await startWorker('sample-app/psp/main.js', {
    PSP_PORT: '0',
    PSP_DELAY_MS: '200',
  });
  const started: { app: WorkerProcess; database: TestDatabase }[] = [];
  const start = async (label: string, main: string, psp: WorkerProcess) => {
    const database = await createTestDatabase(`bench_flow_${label}`);
    const app = await startWorker(main, {
      PORT: String(await freePort()),
      DATABASE_URL: database.url,
      PSP_URL: psp.url,
      HTTP_ADAPTER: 'express',
      IDEMPOTENCY_PURGE_INTERVAL_MS: '3600000',
    });
    started.push({ app, database });
    return app;
  };
  const tenant = { 'x-tenant-id': '1' };
  let n = 0;
  const body = () => JSON.stringify({ amount: 1999, currency: 'eur', customer: `cus_${n++ % 50}` });
  const variants: Variant[] = [];
  for (const [label, main] of builds) {
    const fast = await start(`${label}_0`, main, psp0);
    const slow = await start(`${label}_200`, main, psp200);
    const fixed = body();
    const keys = Array.from({ length: 64 }, (_, i) => `flow-${label.replace(/\W/g, '_')}-${i}`);
    await prepare(fast, '/charges', keys, tenant, fixed);
    const fresh = (i: number) => ({ ...tenant, 'idempotency-key': `f-${i}-${Math.random()}` });
    variants.push(
      {
        name: `${label}: new keys, PSP 0 ms, 16 conn.`,
        app: fast,
        path: '/charges',
        connections: 16,
        headers: fresh,
        body: fixed,
      },
      {
        name: `${label}: replays, 16 conn.`,
        app: fast,
        path: '/charges',
        connections: 16,
        headers: (i) => ({ ...tenant, 'idempotency-key': keys[i % keys.length] }),
        body: fixed,
      },
      {
        name: `${label}: new keys, PSP 200 ms, 64 conn.`,
        app: slow,
        path: '/charges',
        connections: 64,
        headers: fresh,
        body: fixed,
      },
    );
  }
  ensureCompetitor();
  const theirDatabase = await createTestDatabase('bench_flow_competitor');
  const competitor = await startWorker('bench/competitor-charges-app.js', {
    PORT: '0',
    DATABASE_URL: theirDatabase.url,
    PSP_URL: psp0.url,
    COMPETITOR_REDIS_URL: REDIS_URL,
  });
  const theirKeys = Array.from({ length: 64 }, (_, i) => `flow-competitor-${i}-${Date.now()}`);
  const fixed = variants[0].body;
  await prepare(competitor, '/charges', theirKeys, tenant, fixed);
  variants.push(
    {
      ...variants[0],
      name: 'competitor on Redis: new keys, PSP 0 ms, 16 conn.',
      app: competitor,
    },
    {
      ...variants[1],
      name: 'competitor on Redis: replays, 16 conn.',
      app: competitor,
      headers: (i) => ({ ...tenant, 'idempotency-key': theirKeys[i % theirKeys.length] }),
    },
  );
  const results = await rounds(variants);
  out.push(`\n**The sample app's POST /charges** (÷ this build's same variant)\n\n${HEADER}`);
  for (const [name, sample] of results) {
    out.push(row(name, sample, results.get(`this build: ${name.split(': ')[1]}`)!));
  }
  console.log(out.slice(-(results.size + 3)).join('\n'));
  for (const { app, database } of started) {
    await app.kill('SIGTERM');
    await database.drop();
  }
  await competitor.kill('SIGTERM');
  await theirDatabase.drop();
  await psp0.kill('SIGTERM');
  await psp200.kill('SIGTERM');
}

async function main() {
  let adminUrl = process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL;
  const embedded = adminUrl ? undefined : await startEmbeddedPostgres();
  adminUrl ??= embedded!.url;
  process.env.TEST_DATABASE_URL = adminUrl;
  const out: string[] = [];
  const parts = (process.env.BENCH_PARTS ?? 'insert,prisma,drizzle,flow').split(',');
  if (parts.includes('insert')) await oneInsert(out);
  if (parts.includes('prisma')) await prismaInsert(out);
  if (parts.includes('drizzle')) await drizzleOneInsert(out);
  if (parts.includes('flow')) await sampleFlow(out);
  await embedded?.stop();
  console.log(`\n${out.join('\n')}`);
  console.log(
    `\n${ROUNDS} interleaved rounds of ${DURATION_S} s each; medians. Node ${process.version}, ` +
      `${(await import('node:os')).cpus().length} cores.`,
  );
}

await main();
