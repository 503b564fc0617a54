/**
 * The app's CPU per new key, counted so that a busy machine cannot change it:
 * `npx tsc -p tsconfig.json && node dist/bench/app-cpu-per-key.js` (not part of `npm test`).
 *
 * The bench app (`bench/bench-app.ts`) runs under `valgrind --tool=callgrind`, and one client
 * sends each route new keys one after another, route after route: a warm-up (so that V8 has
 * compiled what it will), then N1 requests, then N2, with the counters dumped
 * (`callgrind_control -d`) between them. Instructions per request are
 * (count(N2) - count(N1)) / (N2 - N1): what the app's process (every thread: V8's compilers
 * and collector too) executes for one more request, with the dumps and what does not grow with
 * the requests cancelled out. Wall-clock throughput on a shared 2-core machine moves with
 * whatever else runs; these counts do not (the JIT's timing moves them by a few per cent).
 * I(N1) / N1 and I(N2) / N2 are shown too: a cost that grows with the requests served shows as
 * their difference.
 *
 * `APP_CPU_TOOL=heap` runs the same without valgrind and reports, per request, the bytes the
 * JS heap allocated (the young generation made large enough that no collection runs between
 * two marks; see `bench/support/heap-marks.ts`) and the CPU time (noisy, for a sense of scale).
 *
 * Environment: `APP_CPU_ROUTES` (default `plain,floor,floor-one,idempotent,one-commit`; the
 * `-orm` routes save through TypeORM), `HTTP_ADAPTER` (`express`, the default, or `fastify`),
 * `APP_CPU_WARMUP` (300), `APP_CPU_N1` (100), `APP_CPU_N2` (300), `APP_CPU_BASELINE` (another
 * build's `dist` directory, with `node_modules` beside it: its app is measured in the same run,
 * in parallel, as `baseline`).
 */
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { Agent, request } from 'node:http';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Client } from 'pg';
import { createTestDatabase } from '../test/support/database.js';

const TOOL = process.env.APP_CPU_TOOL ?? 'callgrind';
const ADAPTER = process.env.HTTP_ADAPTER ?? 'express';
const WARMUP = Number(process.env.APP_CPU_WARMUP ?? 300);
const N1 = Number(process.env.APP_CPU_N1 ?? 100);
const N2 = Number(process.env.APP_CPU_N2 ?? 300);
const ROUTES = (process.env.APP_CPU_ROUTES ?? 'plain,floor,floor-one,idempotent,one-commit').split(
  ',',
);
const BASELINE = process.env.APP_CPU_BASELINE;
const BODY = JSON.stringify({ amount: 1999, customer: 'cus_bench' });

/** A build of the bench app: its routes are measured one after another in one process. */
interface Build {
  label: string;
  app: string;
}

interface Started {
  child: ChildProcess;
  port: number;
  lines: string[];
}

function start(app: string, env: NodeJS.ProcessEnv, dir: string, tool = TOOL): Promise<Started> {
  const node = [process.execPath];
  // Marks (see heap-marks.ts) collect the garbage: under callgrind, before each dump, so that
  // a full collection falls at the same place in every segment, not wherever the heap fills.
  const marks = ['--expose-gc', '--import', resolve('dist', 'bench', 'support', 'heap-marks.js')];
  const args =
    tool === 'callgrind'
      ? [
          'valgrind',
          '--tool=callgrind',
          '--dump-instr=no',
          '--dump-line=no',
          `--callgrind-out-file=${join(dir, 'cg.%p')}`,
          ...node,
          ...marks,
          app,
        ]
      : [...node, '--min-semi-space-size=64', '--max-semi-space-size=64', ...marks, app];
  const child = spawn(args[0], args.slice(1), {
    env,
    stdio: ['ignore', 'pipe', tool === 'callgrind' ? 'ignore' : 'inherit'],
  });
  const lines: string[] = [];
  return new Promise((done, fail) => {
    let output = '';
    child.once('exit', (code) => fail(new Error(`${app} exited with ${code}`)));
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const parts = output.split('\n');
      output = parts.pop()!;
      for (const line of parts) {
        lines.push(line);
        const match = /listening on (\d+)/.exec(line);
        if (match) done({ child, port: Number(match[1]), lines });
      }
    });
  });
}

function post(agent: Agent, port: number, path: string, key: string): Promise<number> {
  return new Promise((done, fail) => {
    const req = request(
      {
        agent,
        host: '127.0.0.1',
        port,
        method: 'POST',
        path,
        headers: {
          'content-type': 'application/json',
          'content-length': Buffer.byteLength(BODY),
          'idempotency-key': key,
        },
      },
      (res) => {
        res.resume();
        res.once('end', () => done(res.statusCode ?? 0));
      },
    );
    req.once('error', fail);
    req.end(BODY);
  });
}

async function sendOn(route: string, port: number, agent: Agent, n: number, tag: string) {
  for (let i = 0; i < n; i++) {
    const status = await post(agent, port, `/${route}`, `${tag}-${i}`);
    if (status !== 201) throw new Error(`${route}: ${status} on request ${i} of ${tag}`);
  }
}

/** Dumps callgrind's counters (which it then zeroes) and returns the instructions dumped. */
async function dump(pid: number, dir: string, index: number): Promise<number> {
  execFileSync('callgrind_control', ['-d', String(pid)], { stdio: 'ignore' });
  const file = join(dir, `cg.${pid}.${index}`);
  for (let i = 0; i < 600 && !existsSync(file); i++) await new Promise((r) => setTimeout(r, 100));
  for (let i = 0; i < 600; i++) {
    const match = /^(?:summary|totals): (\d+)/m.exec(readFileSync(file, 'utf8'));
    if (match) return Number(match[1]);
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no totals in ${file}`);
}

interface Mark {
  heap: number;
  after: number;
  gcs: number;
  cpu: number;
}

async function mark(started: Started): Promise<Mark> {
  const seen = started.lines.length;
  started.child.kill('SIGUSR2');
  for (;;) {
    const line = started.lines.slice(seen).find((l) => l.startsWith('heap-mark '));
    if (line) return JSON.parse(line.slice('heap-mark '.length)) as Mark;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Measures each route in turn in one process of `build`: one row per route. */
async function measure(build: Build, url: string): Promise<string[]> {
  const dir = mkdtempSync(join(tmpdir(), 'app-cpu-'));
  const started = await start(
    build.app,
    { ...process.env, DATABASE_URL: url, HTTP_ADAPTER: ADAPTER, PORT: '0' },
    dir,
  );
  // A fresh connection for each run of requests: under valgrind a mark and a dump take longer
  // than the server keeps an idle connection open (5 s), and a request sent on one it closed
  // meets a hang-up. The connection's cost is one per run, cancelled by the subtraction.
  let agent = new Agent({ keepAlive: true, maxSockets: 1 });
  const send = async (route: string, n: number, tag: string) => {
    agent.destroy();
    agent = new Agent({ keepAlive: true, maxSockets: 1 });
    await sendOn(route, started.port, agent, n, tag);
  };
  const pid = started.child.pid!;
  let dumps = 0;
  const rows: string[] = [];
  try {
    for (const route of ROUTES) {
      // Keys are words: no spaces (a key with one is refused, 400).
      const tag = `${build.label.replace(/\W/g, '_')}-${route}-${Date.now()}`;
      const label = `${build.label}: ${route}`;
      await send(route, WARMUP, `${tag}-warmup`);
      if (TOOL === 'callgrind') {
        await mark(started);
        await dump(pid, dir, ++dumps);
        await send(route, N1, `${tag}-n1`);
        await mark(started);
        const first = await dump(pid, dir, ++dumps);
        await send(route, N2, `${tag}-n2`);
        await mark(started);
        const second = await dump(pid, dir, ++dumps);
        const perRequest = (second - first) / (N2 - N1);
        rows.push(
          `| ${label} | ${Math.round(perRequest / 1000)} k | ${Math.round(first / N1 / 1000)} k | ${Math.round(second / N2 / 1000)} k |`,
        );
      } else {
        const m0 = await mark(started);
        await send(route, N1, `${tag}-n1`);
        const m1 = await mark(started);
        await send(route, N2, `${tag}-n2`);
        const m2 = await mark(started);
        const bytes = (m2.heap - m1.after - (m1.heap - m0.after)) / (N2 - N1);
        const cpu = (m2.cpu - m1.cpu - (m1.cpu - m0.cpu)) / (N2 - N1);
        rows.push(
          `| ${label} | ${(bytes / 1024).toFixed(1)} KB | ${Math.round(cpu)} µs | ${m1.gcs}/${m2.gcs} |`,
        );
      }
      console.error(rows[rows.length - 1]);
    }
    return rows;
  } finally {
    agent.destroy();
    started.child.removeAllListeners('exit');
    started.child.kill('SIGKILL');
  }
}

async function main(): Promise<void> {
  const database = await createTestDatabase('bench_app_cpu');
  const db = new Client({ connectionString: database.url });
  await db.connect();
  await db.query(
    'CREATE TABLE bench_orders (id bigserial PRIMARY KEY, amount int, customer text, created_at timestamptz DEFAULT now())',
  );
  const app = resolve('dist', 'bench', 'bench-app.js');
  const builds: Build[] = [{ label: 'this build', app }];
  if (BASELINE) builds.push({ label: 'baseline', app: resolve(BASELINE, 'bench', 'bench-app.js') });
  // The migrations run once, before the apps that run in parallel would race to run them.
  const first = await start(
    app,
    { ...process.env, DATABASE_URL: database.url, PORT: '0' },
    '',
    'heap',
  );
  first.child.removeAllListeners('exit');
  first.child.kill('SIGKILL');
  const rows = await Promise.all(builds.map((build) => measure(build, database.url)));
  await db.end();
  await database.drop();
  console.log(
    TOOL === 'callgrind'
      ? `${ADAPTER}, instructions per new key (warm-up ${WARMUP}, N1 ${N1}, N2 ${N2})\n\n` +
          '| route | (I(N2) - I(N1)) / (N2 - N1) | I(N1) / N1 | I(N2) / N2 |\n| --- | --- | --- | --- |'
      : `${ADAPTER}, per new key (warm-up ${WARMUP}, N1 ${N1}, N2 ${N2})\n\n` +
          '| route | JS heap allocated | CPU (noisy) | GCs in N1/N2 |\n| --- | --- | --- | --- |',
  );
  console.log(rows.flat().join('\n'));
}

await main();
