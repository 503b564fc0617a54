/**
 * `npx tsc -p tsconfig.json && node dist/bench/profile-new-keys.js`: a CPU profile of the app
 * serving new keys on the one-insert route (`/idempotent`, raw INSERT, Fastify, 16
 * connections), written to
 * `bench/profiles/new-key-raw-insert.cpuprofile` (open it in Chrome's DevTools), and its
 * account: the app's time by where it went (the library, node-postgres, the socket writes, the
 * framework, the collector), and the functions with the most time of their own.
 */
import autocannon from 'autocannon';
import { spawn } from 'node:child_process';
import { copyFileSync, mkdtempSync, readdirSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';
import { createTestDatabase } from '../test/support/database.js';

const SECONDS = Number(process.env.BENCH_SECONDS ?? 10);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 16);
/** PROFILE_ROUTE=one-commit profiles the oneCommit route; plain, the route without the library. */
const ROUTE = process.env.PROFILE_ROUTE ?? 'idempotent';
const OUT = join(
  process.cwd(),
  'bench',
  'profiles',
  ROUTE === 'idempotent'
    ? 'new-key-raw-insert.cpuprofile'
    : `new-key-raw-insert-${ROUTE}.cpuprofile`,
);

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string };
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

/** Where a function's own time goes, by its file. */
function groupOf(frame: ProfileNode['callFrame']): string {
  const { url, functionName } = frame;
  if (!url) {
    if (/^\((idle|program|garbage collector)\)$/.test(functionName)) return functionName;
    return `native: ${functionName || '(anonymous)'}`;
  }
  if (url.includes('/node_modules/pg') || url.includes('/node_modules/pg-protocol'))
    return 'node-postgres';
  if (url.includes('/dist/lib/')) return 'the library (lib/)';
  if (/\/node_modules\/(@nestjs|rxjs|reflect-metadata)/.test(url)) return 'Nest and rxjs';
  if (/\/node_modules\/(fastify|@fastify|find-my-way|light-my-request|avvio)/.test(url))
    return 'Fastify';
  if (url.includes('/node_modules/typeorm')) return 'TypeORM';
  if (url.startsWith('node:')) return `node: ${url.slice(5).split('/').slice(0, 2).join('/')}`;
  return url.includes('/node_modules/') ? 'other packages' : 'the bench app';
}

/** The account of the last `seconds` of the profile: the load, not the app's start. */
function account(profile: Profile, seconds: number): string {
  const byId = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map<number, number>();
  const from = profile.endTime - seconds * 1e6;
  let at = profile.startTime;
  profile.samples.forEach((id, i) => {
    at += profile.timeDeltas[i];
    if (at >= from) self.set(id, (self.get(id) ?? 0) + profile.timeDeltas[i]);
  });
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  const idle = [...self.entries()]
    .filter(([id]) => byId.get(id)!.callFrame.functionName === '(idle)')
    .reduce((sum, [, us]) => sum + us, 0);
  const busy = total - idle;
  const groups = new Map<string, number>();
  const functions = new Map<string, number>();
  for (const [id, us] of self) {
    const frame = byId.get(id)!.callFrame;
    if (frame.functionName === '(idle)') continue;
    const group = groupOf(frame);
    groups.set(group, (groups.get(group) ?? 0) + us);
    const name = `${frame.functionName || '(anonymous)'} ${frame.url.split('/').slice(-2).join('/')}`;
    functions.set(name, (functions.get(name) ?? 0) + us);
  }
  const share = (us: number) => `${((100 * us) / busy).toFixed(1)} %`;
  const top = (map: Map<string, number>, n: number) =>
    [...map.entries()]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([name, us]) => `| ${name} | ${share(us)} |`)
      .join('\n');
  return [
    `busy ${(busy / 1e6).toFixed(1)} s of ${(total / 1e6).toFixed(1)} s sampled`,
    '\n| where (self time) | share of the busy time |\n| --- | --- |',
    top(groups, 14),
    '\n| function (self time) | share of the busy time |\n| --- | --- |',
    top(functions, 20),
  ].join('\n');
}

async function main(): Promise<void> {
  const database = await createTestDatabase('bench_profile');
  const db = new Client({ connectionString: database.url });
  await db.connect();
  await db.query(
    'CREATE TABLE bench_orders (id bigserial PRIMARY KEY, amount int, customer text, created_at timestamptz DEFAULT now())',
  );
  const dir = mkdtempSync(join(tmpdir(), 'idempotency-profile-'));
  const child = spawn(
    process.execPath,
    ['--cpu-prof', '--cpu-prof-dir', dir, join('dist', 'bench', 'bench-app.js')],
    {
      env: { ...process.env, DATABASE_URL: database.url, HTTP_ADAPTER: 'fastify', PORT: '0' },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  const port = await new Promise<number>((resolve) => {
    let output = '';
    child.stdout!.on('data', (chunk: Buffer) => {
      output += chunk.toString();
      const match = /listening on (\d+)/.exec(output);
      if (match) resolve(Number(match[1]));
    });
  });
  let i = 0;
  const result = await autocannon({
    url: `http://127.0.0.1:${port}`,
    connections: CONNECTIONS,
    duration: SECONDS,
    requests: [
      {
        method: 'POST',
        path: `/${ROUTE}`,
        setupRequest: (request) => ({
          ...request,
          headers: {
            'content-type': 'application/json',
            'idempotency-key': `profile-${i++}-${Math.random()}`,
          },
          body: JSON.stringify({ amount: 1999, customer: 'cus_bench' }),
        }),
      },
    ],
  });
  await new Promise<void>((resolve) => {
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
  });
  const file = readdirSync(dir).find((name) => name.endsWith('.cpuprofile'))!;
  copyFileSync(join(dir, file), OUT);
  await db.end();
  await database.drop();
  console.log(
    `${result.requests.total} requests, ${result.requests.average} req/s, ` +
      `${result.non2xx + result.errors} errors; profile in ${OUT}\n`,
  );
  console.log(account(JSON.parse(readFileSync(OUT, 'utf8')) as Profile, SECONDS - 1));
}

await main();
