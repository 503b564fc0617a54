import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../sample-app/database/embedded-postgres.js';
import { adminUrl } from './database.js';

/**
 * A PgBouncer of the test's own, on a free port, in front of the test server, as production
 * PostgreSQL is reached: in transaction pooling mode (by default) with a pool so small that
 * the app's connections take turns on the same server connections.
 */
export interface TestPgBouncer {
  port: number;
  /** A URL of `database` through this PgBouncer, as the test server's user. */
  url(database: string): string;
  /** What PgBouncer logged, for a failure's message. */
  log(): string;
  stop(): Promise<void>;
}

export interface PgBouncerSettings {
  poolMode?: 'transaction' | 'session';
  /** Server connections per database and user. */
  poolSize?: number;
}

/** The pgbouncer binary: `PGBOUNCER`, else the one on PATH, else Debian's /usr/sbin one. */
export function pgbouncerBinary(): string {
  if (process.env.PGBOUNCER) return process.env.PGBOUNCER;
  if (spawnSync('pgbouncer', ['--version']).status === 0) return 'pgbouncer';
  if (existsSync('/usr/sbin/pgbouncer')) return '/usr/sbin/pgbouncer';
  throw new Error(
    'pgbouncer is not installed: apt-get install -y pgbouncer (as .ci/run does), ' +
      'or set PGBOUNCER to its path',
  );
}

/** `pgbouncer --version`'s first line ("PgBouncer 1.18.0"). */
export function pgbouncerVersion(): string {
  const out = spawnSync(pgbouncerBinary(), ['--version'], { encoding: 'utf8' });
  return out.stdout.split('\n')[0].trim();
}

export async function startPgBouncer(settings: PgBouncerSettings = {}): Promise<TestPgBouncer> {
  const server = new URL(adminUrl());
  const user = decodeURIComponent(server.username) || 'postgres';
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'pgbouncer-'));
  // PgBouncer refuses to run as root; as `postgres` it must read its files and write its log.
  chmodSync(dir, 0o777);
  const logfile = join(dir, 'pgbouncer.log');
  // Clients connect without a password (auth_type trust); PgBouncer logs in to the server with
  // the userlist's, which must be the server URL's where it asks for one (the embedded
  // PostgreSQL of a run without TEST_DATABASE_URL does).
  const password = decodeURIComponent(server.password).replace(/"/g, '""');
  const users = user === 'postgres' ? [user] : [user, 'postgres'];
  writeFileSync(
    join(dir, 'userlist.txt'),
    users.map((name) => `"${name}" "${password}"\n`).join(''),
    { mode: 0o644 },
  );
  writeFileSync(
    join(dir, 'pgbouncer.ini'),
    [
      '[databases]',
      // Every database of the test server, as the test files create their own.
      `* = host=${server.hostname} port=${server.port || 5432}`,
      '[pgbouncer]',
      'listen_addr = 127.0.0.1',
      `listen_port = ${port}`,
      "unix_socket_dir = ''",
      'auth_type = trust',
      `auth_file = ${join(dir, 'userlist.txt')}`,
      `pool_mode = ${settings.poolMode ?? 'transaction'}`,
      `default_pool_size = ${settings.poolSize ?? 2}`,
      // Server connections in turn rather than the last one freed: consecutive transactions of
      // one client land on different server connections, as they do under production load.
      'server_round_robin = 1',
      'max_client_conn = 500',
      `logfile = ${logfile}`,
      'log_connections = 0',
      'log_disconnections = 0',
      '',
    ].join('\n'),
    { mode: 0o644 },
  );
  const args = [join(dir, 'pgbouncer.ini')];
  if (process.getuid?.() === 0) args.unshift('-u', 'postgres');
  const child: ChildProcess = spawn(pgbouncerBinary(), args, { stdio: 'ignore' });
  const log = () => (existsSync(logfile) ? readFileSync(logfile, 'utf8') : '');
  try {
    await waitForPort(port, child);
  } catch (error) {
    child.kill('SIGKILL');
    throw new Error(`pgbouncer did not start: ${String(error)}\n${log()}`);
  }
  return {
    port,
    url: (database) => `postgres://${encodeURIComponent(user)}@127.0.0.1:${port}/${database}`,
    log,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        await new Promise<void>((resolve) => {
          child.once('exit', () => resolve());
          child.kill('SIGINT');
        });
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

async function waitForPort(port: number, child: ChildProcess): Promise<void> {
  for (let attempt = 0; attempt < 200; attempt++) {
    if (child.exitCode !== null) throw new Error(`it exited with ${child.exitCode}`);
    const open = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1');
      socket.once('connect', () => {
        socket.destroy();
        resolve(true);
      });
      socket.once('error', () => resolve(false));
    });
    if (open) return;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  throw new Error(`nothing listens on port ${port} after 10 s`);
}

/**
 * `TEST_POOLER=pgbouncer` runs the apps of the existing end-to-end suites behind a PgBouncer
 * in transaction mode (3 server connections, in turn), with the module's `pooler:
 * 'transaction'` (`TEST_POOLER=pgbouncer npm test -- test/idempotency.e2e-spec.ts`, say). The PgBouncer is the test file's own, started on first
 * use and stopped after its last test. Only URLs of the test server are rerouted (one through
 * a test's TCP proxy stays as it is), and only in the test file's process (a worker process
 * the test spawns connects directly).
 */
export const POOLED = process.env.TEST_POOLER === 'pgbouncer' && typeof afterAll === 'function';

let shared: Promise<TestPgBouncer> | undefined;

if (POOLED) {
  afterAll(async () => {
    const running = shared;
    shared = undefined;
    await (await running)?.stop();
  });
}

/** The app's URL: through the file's PgBouncer when `TEST_POOLER=pgbouncer`. */
export async function appDatabaseUrl(url: string): Promise<string> {
  if (!POOLED) return url;
  const target = new URL(url);
  const server = new URL(adminUrl());
  if (target.host !== server.host) return url;
  shared ??= startPgBouncer({ poolMode: 'transaction', poolSize: 3 });
  return (await shared).url(target.pathname.slice(1));
}

/** The module's options for the app's connection: `pooler` when it goes through PgBouncer. */
export function poolerOption(): { pooler?: 'transaction' } {
  return POOLED ? { pooler: 'transaction' } : {};
}
