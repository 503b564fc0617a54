import { execFile } from 'node:child_process';
import { appendFile, chmod, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client } from 'pg';
import { freePort } from '../../sample-app/database/embedded-postgres.js';

const run = promisify(execFile);
const BIN = '/usr/lib/postgresql/15/bin';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** PostgreSQL refuses to run as root: as root, its commands run as the `postgres` user. */
const asRoot = process.getuid?.() === 0;
function asPostgres(command: string, args: string[]) {
  return asRoot
    ? run('runuser', ['-u', 'postgres', '--', join(BIN, command), ...args])
    : run(join(BIN, command), args);
}

/**
 * A primary and its one synchronous standby (`synchronous_standby_names = 'standby'`,
 * `synchronous_commit = on`), each a PostgreSQL 15 cluster of the test's own: while the
 * standby is stopped, every commit on the primary waits in `SyncRep` for it.
 */
export interface SyncStandbyPair {
  /** The primary's connection string (database `postgres`). */
  url: string;
  /** The standby stops at once (`pg_ctl -m immediate`): commits on the primary wait. */
  stopStandby(): Promise<void>;
  /** The standby starts again and catches up: the commits that waited for it go through. */
  startStandby(): Promise<void>;
  /** A write committed on the primary and confirmed by the standby, within `timeoutMs`. */
  commitsConfirmed(timeoutMs: number): Promise<boolean>;
  stop(): Promise<void>;
}

export async function startSyncStandbyPair(): Promise<SyncStandbyPair> {
  const dir = await mkdtemp(join(tmpdir(), 'idempotency-syncrep-'));
  await chmod(dir, 0o755);
  if (asRoot) await run('chown', ['postgres:postgres', dir]);
  const primary = join(dir, 'primary');
  const standby = join(dir, 'standby');
  const [primaryPort, standbyPort] = [await freePort(), await freePort()];
  const pgCtl = (data: string, ...args: string[]) =>
    asPostgres('pg_ctl', ['-D', data, '-l', `${data}.log`, '-w', '-t', '60', ...args]);
  const stop = async () => {
    for (const data of [standby, primary]) {
      await pgCtl(data, '-m', 'immediate', 'stop').catch(() => undefined);
    }
    await rm(dir, { recursive: true, force: true });
  };
  try {
    await asPostgres('initdb', ['-D', primary, '-U', 'postgres', '--auth=trust', '--no-sync']);
    await appendFile(
      join(primary, 'postgresql.conf'),
      [
        `port = ${primaryPort}`,
        `listen_addresses = '127.0.0.1'`,
        `unix_socket_directories = '${dir}'`,
        'fsync = off',
        "synchronous_standby_names = 'standby'",
        'synchronous_commit = on',
        '',
      ].join('\n'),
    );
    await pgCtl(primary, 'start');
    // initdb's pg_hba.conf trusts replication connections from 127.0.0.1.
    await asPostgres('pg_basebackup', [
      '-h', '127.0.0.1', '-p', String(primaryPort), '-U', 'postgres', '-D', standby, '-X', 'stream',
      '-R', '--no-sync',
    ]); // prettier-ignore
    await appendFile(
      join(standby, 'postgresql.auto.conf'),
      [
        `port = ${standbyPort}`,
        `primary_conninfo = 'host=127.0.0.1 port=${primaryPort} user=postgres application_name=standby'`,
        '',
      ].join('\n'),
    );
    await pgCtl(standby, 'start');
    const url = `postgres://postgres@127.0.0.1:${primaryPort}/postgres`;
    const pair: SyncStandbyPair = {
      url,
      stopStandby: () => pgCtl(standby, '-m', 'immediate', 'stop').then(() => undefined),
      startStandby: () => pgCtl(standby, 'start').then(() => undefined),
      commitsConfirmed: (timeoutMs) => commitsConfirmed(url, timeoutMs),
      stop,
    };
    if (!(await pair.commitsConfirmed(30_000))) {
      throw new Error('the standby did not confirm a commit in 30 s');
    }
    return pair;
  } catch (error) {
    await stop();
    throw error;
  }
}

/**
 * Whether a commit on the primary comes back within `timeoutMs`: it does only once the
 * synchronous standby confirmed it. A commit still waiting is given up by closing its
 * connection (the server keeps waiting; it is not cancelled, which would make it commit).
 */
async function commitsConfirmed(url: string, timeoutMs: number): Promise<boolean> {
  const deadline = Date.now() + timeoutMs;
  while (Date.now() < deadline) {
    const client = new Client({ connectionString: url, query_timeout: 1000 });
    client.on('error', () => undefined);
    try {
      await client.connect();
      await client.query('CREATE TABLE IF NOT EXISTS syncrep_probe (at timestamptz)');
      await client.query('INSERT INTO syncrep_probe VALUES (now())');
      return true;
    } catch {
      await sleep(200);
    } finally {
      await client.end().catch(() => undefined);
    }
  }
  return false;
}
