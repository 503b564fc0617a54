/**
 * A PostgreSQL HA cluster of pg_auto_failover (Debian's `postgresql-15-auto-failover`) on this
 * machine, for `npm run test:ha`: a monitor and three data nodes (a primary and two standbys,
 * `number_sync_standbys = 1`), each a cluster of its own on its own port, all in one folder
 * that `stop()` removes. With two standbys of which one must confirm each commit, any one
 * node may be down while every commit still reaches a second node: a promoted standby never
 * runs alone (`wait_primary`), and a second failure right after the first loses nothing.
 *
 * `pg_autoctl` refuses to run as root (its initdb does), so every command runs as the
 * `postgres` user, with its XDG folders inside the cluster's folder. The monitor's timeouts
 * are shortened (health check every second, a node unhealthy after 3 s, a primary demoted
 * after 6 s), so that a failover takes seconds rather than a minute.
 */
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import {
  chownSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../../sample-app/database/embedded-postgres.js';

const BIN = '/usr/lib/postgresql/15/bin';
const WRITABLE = new Set(['single', 'primary', 'wait_primary']);
/** The states of a standby the monitor chose for promotion, on its way to primary. */
const PROMOTING = new Set(['prepare_promotion', 'stop_replication', 'wait_primary']);
/** How many data nodes the run's cluster has. */
const DATA_NODES = 3;
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Thrown when the cluster cannot be had here: the run is skipped, saying why. */
export class ClusterUnavailableError extends Error {}

export interface NodeState {
  name: string;
  port: number;
  reported: string;
  assigned: string;
}

/**
 * Checks that pg_auto_failover (Debian's `postgresql-15-auto-failover`) is installed, and that
 * there is a `postgres` user to run it as. It is not installed from here: `.ci/run` installs
 * it when asked (`INSTALL_PG_AUTO_FAILOVER=1`), or root does it by hand.
 */
export function ensureInstalled(): void {
  if (!existsSync('/usr/bin/pg_autoctl') || !existsSync(`${BIN}/pg_ctl`)) {
    throw new ClusterUnavailableError(
      'pg_auto_failover is not installed (Debian: apt-get install postgresql-15-auto-failover, ' +
        'as root; or INSTALL_PG_AUTO_FAILOVER=1 .ci/run)',
    );
  }
  if (spawnSync('id', ['postgres']).status !== 0) {
    throw new ClusterUnavailableError('there is no postgres user to run pg_autoctl as');
  }
}

export class AutoFailoverCluster {
  private constructor(
    readonly dir: string,
    readonly monitorPort: number,
    readonly nodes: { name: string; port: number }[],
  ) {}

  /** The connection string the apps use: every node, the writable one followed. */
  get url(): string {
    const hosts = this.nodes.map(({ port }) => `127.0.0.1:${port}`).join(',');
    return `postgres://postgres@${hosts}/app?target_session_attrs=read-write`;
  }

  static async start(): Promise<AutoFailoverCluster> {
    ensureInstalled();
    const dir = mkdtempSync(join(tmpdir(), 'idempotency-ha-'));
    const owner = (flag: string) =>
      Number(execFileSync('id', [flag, 'postgres'], { encoding: 'utf8' }));
    for (const sub of ['', 'xdg', 'xdg/config', 'xdg/data', 'xdg/run']) {
      mkdirSync(join(dir, sub), { recursive: true, mode: 0o700 });
      chownSync(join(dir, sub), owner('-u'), owner('-g'));
    }
    const monitorPort = await freePort();
    const nodes: { name: string; port: number }[] = [];
    for (let i = 1; i <= DATA_NODES; i++) nodes.push({ name: `node${i}`, port: await freePort() });
    const cluster = new AutoFailoverCluster(dir, monitorPort, nodes);
    try {
      cluster.autoctl(
        `create monitor --pgdata ${dir}/monitor --pgport ${monitorPort} --hostname 127.0.0.1 --auth trust --no-ssl`,
      );
      cluster.keeper('monitor');
      await cluster.until(() => cluster.monitorAnswers(), 'the monitor', 30_000);
      cluster.psql(
        monitorPort,
        'pg_auto_failover',
        'ALTER SYSTEM SET pgautofailover.health_check_period = 1000',
        'ALTER SYSTEM SET pgautofailover.node_considered_unhealthy_timeout = 3000',
        'ALTER SYSTEM SET pgautofailover.primary_demote_timeout = 6000',
        'SELECT pg_reload_conf()',
      );
      for (const { name, port } of cluster.nodes) {
        cluster.autoctl(
          `create postgres --pgdata ${dir}/${name} --pgport ${port} --hostname 127.0.0.1 ` +
            `--name ${name} --monitor 'postgres://autoctl_node@127.0.0.1:${monitorPort}/pg_auto_failover?sslmode=disable' ` +
            '--auth trust --no-ssl --dbname app',
        );
        cluster.autoctl(`config set timeout.network_partition_timeout 3 --pgdata ${dir}/${name}`);
        cluster.keeper(name);
        // The first node runs alone ('single') until the second joins as its standby; each
        // node joins before the next is made (the monitor registers one at a time).
        await cluster.until(
          async () =>
            (await cluster.state()).some(
              (n) =>
                n.name === name &&
                n.reported === n.assigned &&
                ['single', 'primary', 'secondary'].includes(n.reported),
            ),
          `${name} to join`,
          120_000,
        );
      }
      await cluster.until(
        async () => (await cluster.primary()) !== undefined && (await cluster.settled()),
        'a primary with its standbys',
        120_000,
      );
      // One of the two standbys confirms each commit (the monitor sets it to 1 by itself
      // when the second standby joins; set here so that the run does not depend on that).
      cluster.autoctl(`set formation number-sync-standbys 1 --pgdata ${dir}/node1`);
      await cluster.until(() => cluster.settled(), 'the cluster to settle', 60_000);
      return cluster;
    } catch (error) {
      await cluster.stop();
      throw error;
    }
  }

  /** The nodes as the monitor sees them. */
  async state(): Promise<NodeState[]> {
    try {
      const rows = this.psql(
        this.monitorPort,
        'pg_auto_failover',
        `SELECT nodename, nodeport, reportedstate, goalstate FROM pgautofailover.node ORDER BY nodeid`,
      );
      return rows
        .split('\n')
        .filter(Boolean)
        .map((line) => {
          const [name, port, reported, assigned] = line.split('|');
          return { name, port: Number(port), reported, assigned };
        });
    } catch {
      return [];
    }
  }

  /**
   * The node that accepts writes, if one does: `primary` with its standby, `wait_primary` while
   * the standby is gone (a promoted node whose old primary is down), `single` alone.
   */
  async primary(): Promise<string | undefined> {
    return (await this.state()).find((n) => n.reported === n.assigned && WRITABLE.has(n.reported))
      ?.name;
  }

  /** Whether every node is settled: one primary, the others its secondaries. */
  async settled(): Promise<boolean> {
    const states = (await this.state()).map((n) => `${n.reported}/${n.assigned}`).sort();
    const secondaries = Array.from({ length: this.nodes.length - 1 }, () => 'secondary/secondary');
    return states.join(',') === ['primary/primary', ...secondaries].join(',');
  }

  /** The node the monitor chose to promote, while it is on its way (not yet writable). */
  async promoting(): Promise<string | undefined> {
    return (await this.state()).find(
      (n) => PROMOTING.has(n.assigned) && !(n.reported === n.assigned && WRITABLE.has(n.reported)),
    )?.name;
  }

  /** `synchronous_standby_names` of a node, as the monitor made its keeper set it. */
  syncStandbyNames(name: string): string {
    const { port } = this.nodes.find((n) => n.name === name)!;
    return this.psql(port, 'postgres', 'SHOW synchronous_standby_names').trim();
  }

  /**
   * A node's machine dies: its keeper and its PostgreSQL, SIGKILLed. Repeated until nothing of
   * the node is left for a while: a keeper caught restarting PostgreSQL (as it does when it
   * promotes) may have forked a `pg_ctl` that starts the postmaster just after the first
   * sweep, and a node that comes back by itself is not a node that died.
   */
  async kill(name: string): Promise<void> {
    const sessions = this.sessionsOf(name);
    for (let quiet = 0; quiet < 3;) {
      const found = this.signalSessions(sessions, 'SIGKILL') + this.signalPath(name, 'SIGKILL');
      quiet = found === 0 ? quiet + 1 : 0;
      await sleep(200);
    }
  }

  /**
   * A killed node's keeper started again, as on a machine that restarted: it rejoins, as a
   * standby. The killed postmaster may linger as a zombie (its parent killed, and this
   * machine's init not reaping it), and its `postmaster.pid` would then name a live process:
   * the file is removed, as a restart of the machine would leave no such process.
   */
  restart(name: string): void {
    const pidFile = join(this.dir, name, 'postmaster.pid');
    if (existsSync(pidFile)) {
      const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
      if (!isRunning(pid)) rmSync(pidFile, { force: true });
    }
    this.keeper(name);
  }

  async stop(): Promise<void> {
    for (const name of [...this.nodes.map((n) => n.name), 'monitor']) {
      this.signalSessions(this.sessionsOf(name), 'SIGTERM');
      this.signalPath(name, 'SIGTERM');
    }
    await sleep(2000);
    this.signalAll('SIGKILL');
    spawnSync('pkill', ['-9', '-f', this.dir]);
    // HA_LOGS=<folder> keeps the keepers' and the monitor's logs, to read a run afterwards.
    const keep = process.env.HA_LOGS;
    if (keep) {
      mkdirSync(keep, { recursive: true });
      for (const file of readdirSync(this.dir).filter((f) => f.endsWith('.log'))) {
        copyFileSync(join(this.dir, file), join(keep, file));
      }
    }
    rmSync(this.dir, { recursive: true, force: true });
  }

  /**
   * The sessions of a node's keeper: `su` starts it in a session of its own, and
   * pg_autoctl's children rename themselves ("pg_autoctl: start/stop postgres"), so neither
   * the spawned pid's group nor a match on the folder's path reaches them all; the session
   * of the process running `--pgdata <node>` does.
   */
  private sessionsOf(name: string): Set<number> {
    const sessions = new Set(
      pgrep(`--pgdata ${join(this.dir, name)}( |$)`).map((pid) => sessionOf(pid)),
    );
    // Never this run's own session (were the keeper to share it), nor a process gone.
    for (const excluded of [sessionOf(process.pid), -1, 0]) sessions.delete(excluded);
    return sessions;
  }

  /** Signals every process of these sessions; how many there were. */
  private signalSessions(sessions: Set<number>, signal: NodeJS.Signals): number {
    let found = 0;
    for (const pid of allPids()) {
      if (sessions.has(sessionOf(pid))) {
        signalQuietly(pid, signal);
        found++;
      }
    }
    return found;
  }

  /** Signals every process whose command line names the node's folder; how many there were. */
  private signalPath(name: string, signal: NodeJS.Signals): number {
    // The folder's name ends the match, so that node1 is not node10.
    const pids = pgrep(`${join(this.dir, name)}( |$)`);
    for (const pid of pids) signalQuietly(pid, signal);
    return pids.length;
  }

  /** Every process whose working folder is the cluster's (each command starts there). */
  private signalAll(signal: NodeJS.Signals): void {
    for (const pid of allPids()) {
      try {
        if (readlinkSync(`/proc/${pid}/cwd`).startsWith(this.dir)) signalQuietly(pid, signal);
      } catch {
        // gone, or not ours to read
      }
    }
  }

  async until(check: () => Promise<boolean> | boolean, what: string, timeoutMs: number) {
    const deadline = Date.now() + timeoutMs;
    while (!(await check())) {
      if (Date.now() > deadline) throw new Error(`the HA cluster: timed out waiting for ${what}`);
      await sleep(250);
    }
  }

  private monitorAnswers(): boolean {
    return (
      spawnSync(`${BIN}/pg_isready`, ['-h', '127.0.0.1', '-p', String(this.monitorPort)]).status ===
      0
    );
  }

  /** A shell command as the postgres user: `su` may reset the environment, so it is set here. */
  private asPostgres(command: string): [string, string[]] {
    const exports = [
      `export PATH=${BIN}:/usr/bin:/bin`,
      `export XDG_CONFIG_HOME=${join(this.dir, 'xdg/config')}`,
      `export XDG_DATA_HOME=${join(this.dir, 'xdg/data')}`,
      `export XDG_RUNTIME_DIR=${join(this.dir, 'xdg/run')}`,
      `cd ${this.dir}`,
    ].join('; ');
    return ['su', ['postgres', '-s', '/bin/bash', '-c', `${exports}; ${command}`]];
  }

  /** A pg_autoctl command, run to its end. */
  private autoctl(args: string): string {
    const [command, argv] = this.asPostgres(`pg_autoctl ${args}`);
    return execFileSync(command, argv, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  }

  /** `pg_autoctl run` for a node (or the monitor), in the background, logging to its file. */
  private keeper(name: string): void {
    const [command, argv] = this.asPostgres(
      `exec pg_autoctl run --pgdata ${this.dir}/${name} >> ${this.dir}/${name}.log 2>&1`,
    );
    spawn(command, argv, { stdio: 'ignore', detached: true }).unref();
  }

  /** Statements run one by one (each `-c` its own transaction: ALTER SYSTEM needs that). */
  private psql(port: number, database: string, ...statements: string[]): string {
    const args = ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-d', database, '-Atq'];
    for (const statement of statements) args.push('-c', statement);
    return execFileSync(`${BIN}/psql`, args, {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    });
  }
}

/** The processes whose command line matches `pattern` (an extended regular expression). */
function pgrep(pattern: string): number[] {
  // `--`: a pattern that starts with `--pgdata` is not one of pgrep's options.
  return spawnSync('pgrep', ['-f', '--', pattern], { encoding: 'utf8' })
    .stdout.split('\n')
    .filter(Boolean)
    .map(Number);
}

/** Whether `pid` is a process that runs: neither gone nor a zombie. */
function isRunning(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2)[0] !== 'Z';
  } catch {
    return false;
  }
}

function allPids(): number[] {
  return readdirSync('/proc')
    .filter((entry) => /^\d+$/.test(entry))
    .map(Number);
}

/** A process's session id (field 6 of /proc/<pid>/stat), or -1 when it is gone. */
function sessionOf(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    // The name (field 2) is in parentheses and may hold spaces: count from its end.
    return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[3]);
  } catch {
    return -1;
  }
}

function signalQuietly(pid: number, signal: NodeJS.Signals): void {
  try {
    process.kill(pid, signal);
  } catch {
    // already gone
  }
}
