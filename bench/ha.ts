/**
 * `npm run test:ha`: the sample app across PostgreSQL failures, with its invariants checked
 * at the end. Not part of `npm test`: it brings up a pg_auto_failover cluster, which takes a
 * minute, from Debian's `postgresql-15-auto-failover` (which `.ci/run` installs when asked,
 * `INSTALL_PG_AUTO_FAILOVER=1`); without it, it says so and exits 0.
 *
 * The cluster is a monitor and three data nodes with `number_sync_standbys = 1`. Three
 * sample-app instances (Express and Fastify) connect to every node and follow the writable
 * one (`postgresConnection()` of a multi-host URL); the fake PSP runs as its own process;
 * clients send charges and transfers, each intent by two racing clients that retry with
 * backoff and their key. Mid-run, one round of failures (`HA_ROUND`):
 *
 * - `primary-twice`: the primary is SIGKILLed (its keeper and its PostgreSQL); once a standby
 *   is promoted and takes writes, and before the cluster is whole again, the new primary is
 *   SIGKILLed too.
 * - `candidate`: the primary is SIGKILLed, then the standby the monitor chose to promote, on
 *   its way to primary.
 *
 *   In both, the last node is promoted alone only if the monitor can tell that it holds every
 *   commit; else, `HA_DOWN_SECONDS` (15) after the second failure, the second node killed
 *   starts again, and the monitor promotes one of the two.
 * - `standbys`: both standbys are SIGKILLed and the primary stays up. Every commit waits in
 *   `SyncRep` for a standby that is not there: the requests answer 503, and none may answer
 *   201 (a 201 there would be an answer no standby holds). Then the standbys start again.
 *   Transfers wait 2 s after their write (`TRANSFER_DELAY_MS`), so that some are in their
 *   handler when the standbys go.
 *
 * The killed nodes are started again and rejoin as standbys. At the end, from the primary
 * and the PSP: one charge and one PSP authorization per charge intent (no derived key under
 * two claims), one transfer per transfer key, the row of every 201 present with the id its
 * client was given, no stored 500, no key left unfinished, and every instance still serving
 * without a restart. It prints its figures (requests, answers in each outage, the write
 * outage of each failure, violations), cleans up what it started, and exits non-zero on any
 * violation; 0 with a message when the cluster cannot be had here.
 */
import { Client } from 'pg';
import { MIGRATIONS } from '../sample-app/app.module.js';
import { freePort } from '../sample-app/database/embedded-postgres.js';
import { migrate } from '../sample-app/database/migrate.js';
import { postgresConnection } from '../lib/index.js';
import { startWorker, type WorkerProcess } from '../test/support/worker-process.js';
import { AutoFailoverCluster, ClusterUnavailableError } from './ha/cluster.js';
import { newFigures, RetryingClient } from './support/retrying-client.js';

const SECONDS = Number(process.env.HA_SECONDS ?? 60);
const INTENTS = Number(process.env.HA_INTENTS ?? 300);
const ROUND = (process.env.HA_ROUND ?? 'primary-twice') as Round;
/** How long two failed nodes stay down before one is started again, unless a node is promoted. */
const DOWN_SECONDS = Number(process.env.HA_DOWN_SECONDS ?? 15);
const TENANT = '9';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const started = Date.now();
/** Seconds since `since` (the run's start by default), one decimal. */
const at = (since = started) => ((Date.now() - since) / 1000).toFixed(1);
const log = (event: string) => console.log(`${at()}s ${event}`);

/** A pg client to whichever node accepts writes, as the apps reach it. */
function writableClient(url: string, timeouts = false): Client {
  const { extra, host, port, username, database } = postgresConnection(url);
  const Writable = extra?.Client ?? Client;
  const client = new Writable({
    host,
    port,
    user: username,
    database,
    ...(timeouts ? { connectionTimeoutMillis: 500, query_timeout: 1000 } : {}),
  });
  // A node killed under an idle client: its next query fails, which is all this run needs.
  client.on('error', () => undefined);
  return client;
}

/** A span of time without a successful write, in ms since the epoch. */
interface Gap {
  from: number;
  to: number;
}

/** Writes to the cluster every 100 ms: every span of over a second without a successful one. */
function outageProbe(url: string) {
  let last = Date.now();
  const gaps: Gap[] = [];
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const client = writableClient(url, true);
      try {
        await client.connect();
        await client.query('INSERT INTO ha_probe DEFAULT VALUES');
        const now = Date.now();
        if (now - last > 1000) gaps.push({ from: last, to: now });
        last = now;
      } catch {
        // no write now
      } finally {
        await client.end().catch(() => undefined);
      }
      await sleep(100);
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
      return gaps;
    },
  };
}

const ROUNDS = ['primary-twice', 'candidate', 'standbys'] as const;
type Round = (typeof ROUNDS)[number];

/** A failure the round caused: when, and what (for the figures). */
interface Failure {
  at: number;
  what: string;
}

/**
 * The round's failures, then the cluster made whole again. `window` is set, for the
 * `standbys` round, to the span in which no standby could confirm a commit.
 */
async function runRound(
  round: Round,
  cluster: AutoFailoverCluster,
  failures: Failure[],
  window: { from?: number; to?: number },
): Promise<void> {
  await sleep(SECONDS * 250);
  const first = (await cluster.primary())!;
  const kill = async (name: string, what: string) => {
    log(`SIGKILL ${name}, ${what} (its keeper and its PostgreSQL)`);
    failures.push({ at: Date.now(), what: `${name}, ${what}` });
    await cluster.kill(name);
  };
  const writableOtherThan = async (...down: string[]) => {
    const primary = await cluster.primary();
    return primary !== undefined && !down.includes(primary) ? primary : undefined;
  };

  if (round === 'standbys') {
    const standbys = cluster.nodes.map((n) => n.name).filter((n) => n !== first);
    window.from = Date.now();
    await Promise.all(standbys.map((name) => kill(name, 'a standby')));
    await sleep(SECONDS * 250);
    log(`${first}'s synchronous_standby_names: ${cluster.syncStandbyNames(first)}`);
    window.to = Date.now();
    for (const name of standbys) {
      log(`${name} starts again`);
      cluster.restart(name);
    }
  } else {
    await kill(first, 'the primary');
    let second: string | undefined;
    if (round === 'primary-twice') {
      await cluster.until(
        async () => (second = await writableOtherThan(first)) !== undefined,
        'a standby to be promoted',
        120_000,
      );
      log(`${second} promoted after ${at(failures[0].at)} s; it takes writes for 2 s`);
      await sleep(2000);
      await kill(second!, 'the new primary, the cluster not whole again');
    } else {
      await cluster.until(
        async () => (second = await cluster.promoting()) !== undefined,
        'the monitor to choose a standby to promote',
        120_000,
      );
      await kill(second!, 'the standby chosen for promotion, on its way');
    }
    // With two nodes of three down, the monitor promotes the last one only if it can tell that
    // it holds every commit: it waits for number_sync_standbys + 1 nodes to report their WAL
    // position. The cluster takes no writes until a killed node is back.
    let third: string | undefined;
    const alone = await cluster
      .until(
        async () => (third = await writableOtherThan(first, second!)) !== undefined,
        'the last node to be promoted alone',
        DOWN_SECONDS * 1000,
      )
      .then(
        () => true,
        () => false,
      );
    if (alone) {
      log(`${third} promoted alone after ${at(failures[1].at)} s`);
    } else {
      log(`no node promoted ${DOWN_SECONDS} s after the second failure; ${second} starts again`);
      cluster.restart(second!);
      await cluster.until(
        async () => (third = await cluster.primary()) !== undefined,
        'a node to be promoted',
        180_000,
      );
      log(`${third} is the primary ${at(failures[1].at)} s after the second failure`);
    }
    await sleep(SECONDS * 100);
    for (const name of alone ? [first, second!] : [first]) {
      log(`${name} starts again`);
      cluster.restart(name);
    }
  }
  await cluster.until(() => cluster.settled(), 'the killed nodes to rejoin', 240_000);
  log(
    `cluster whole again: ${(await cluster.state()).map((n) => `${n.name} ${n.reported}`).join(', ')}`,
  );
}

async function main() {
  if (!ROUNDS.includes(ROUND)) {
    console.log(`HA_ROUND must be one of ${ROUNDS.join(', ')}, got "${ROUND}"`);
    return 2;
  }
  let cluster: AutoFailoverCluster;
  try {
    cluster = await AutoFailoverCluster.start();
  } catch (error) {
    if (error instanceof ClusterUnavailableError) {
      console.log(`test:ha skipped: ${error.message}`);
      return 0;
    }
    throw error;
  }
  const figures = newFigures();
  const instances: WorkerProcess[] = [];
  let psp: WorkerProcess | undefined;
  try {
    const url = cluster.url;
    log(`cluster up: ${(await cluster.state()).map((n) => `${n.name} ${n.reported}`).join(', ')}`);
    await migrate({ type: 'postgres', url, migrations: MIGRATIONS });
    const admin = writableClient(url);
    await admin.connect();
    await admin.query(
      'CREATE TABLE IF NOT EXISTS ha_probe (id bigserial PRIMARY KEY, at timestamptz DEFAULT now())',
    );
    await admin.end();

    psp = await startWorker('bench/soak-psp.js', { PSP_PORT: '0' });
    for (let i = 0; i < 3; i++) {
      instances.push(
        await startWorker('sample-app/main.js', {
          PORT: String(await freePort()),
          DATABASE_URL: url,
          PSP_URL: psp.url,
          HTTP_ADAPTER: i === 1 ? 'fastify' : 'express',
          IDEMPOTENCY_LEASE_MS: '3000',
          // With both standbys gone, the answers at stake are those of requests in their
          // handler when it happens: a transfer that waits 2 s after its write keeps several
          // there.
          TRANSFER_DELAY_MS: ROUND === 'standbys' ? '2000' : '0',
          PSP_TIMEOUT_MS: '5000',
          IDEMPOTENCY_PURGE_INTERVAL_MS: '3600000',
        }),
      );
    }
    const live = () => instances.map((w) => w.url);
    log(`3 instances and the PSP up; round ${ROUND}: ${INTENTS} intents over ${SECONDS} s`);
    const probe = outageProbe(url);
    const client = new RetryingClient(figures, TENANT);
    // Clients retry while the round runs, and give up 60 s after its end or the load's.
    const loadEnd = Date.now() + SECONDS * 1000;
    let end = Infinity;

    const failures: Failure[] = [];
    const window: { from?: number; to?: number } = {};
    const chaos = runRound(ROUND, cluster, failures, window).finally(
      () => (end = Math.max(Date.now(), loadEnd) + 60_000),
    );

    const charges = new Map<number, { status: number; id?: string }>();
    const transfers = new Map<number, { status: number; id?: string }>();
    let retries = 0;
    const intents = Array.from({ length: INTENTS }, async (_, i) => {
      await sleep((i / INTENTS) * SECONDS * 800);
      const isCharge = i % 2 === 0;
      const key = `ha-${i}`;
      const path = isCharge ? '/charges' : '/transfers';
      const body = isCharge
        ? { amount: 1000 + i, currency: 'eur', customer: `cus_ha_${i}` }
        : { amount: 500 + i, from: `acc_ha_${i}`, to: 'acc_ha_sink' };
      const settle = (status: number) => status === 201 || status === 402 || status === 422;
      const [a, b] = await Promise.all(
        [0, 1].map(() =>
          client.untilAnswered(live, path, { 'idempotency-key': key }, body, settle, () => end),
        ),
      );
      retries += (a?.attempts ?? 1) - 1 + (b?.attempts ?? 1) - 1;
      if (!a || !b) {
        figures.violations.push(`${key}: no final answer before the deadline`);
        return;
      }
      if (a.text !== b.text) figures.violations.push(`${key}: two answers for one key`);
      // No standby could hold a commit of the window: a 201 in it is one for an answer that
      // was committed before it (the first 201 of the key came before the window), or false.
      // A second of slack: an answer committed just before the kill may arrive just after.
      const first201 = Math.min(...[a, b].filter((r) => r.status === 201).map((r) => r.at));
      const in201 = [a, b].some(
        (r) => r.status === 201 && r.at > window.from! + 1000 && r.at < window.to!,
      );
      if (window.from !== undefined && in201 && first201 > window.from + 1000) {
        figures.violations.push(`${key}: 201 while no standby could confirm its commit`);
      }
      if (a.status === 422) figures.violations.push(`${key}: 422 for its own request`);
      const parsed = JSON.parse(a.text) as { id?: string };
      (isCharge ? charges : transfers).set(i, { status: a.status, id: parsed.id });
    });
    await Promise.all([chaos, ...intents]);
    const gaps = await probe.stop();
    log(`clients done: ${charges.size} charges and ${transfers.size} transfers answered`);

    // The instances recovered without a restart: each takes a new request.
    for (const [n, instance] of instances.entries()) {
      const res = await client.post(
        instance.url,
        '/transfers',
        { 'idempotency-key': `ha-after-${n}` },
        { amount: 1, from: `acc_after_${n}`, to: 'acc_ha_sink' },
      );
      if (res.status !== 201)
        figures.violations.push(`instance ${n} answers ${res.status} after the failovers`);
    }

    // Invariants, from the primary and the PSP.
    const db = writableClient(url);
    await db.connect();
    // The stored answer of each key its clients were given 201 for.
    const stored = async (key: string) =>
      (
        await db.query<{ state: string; response_code: number | null }>(
          'SELECT state, response_code FROM idempotency_keys WHERE tenant_id = $1 AND key = $2',
          [TENANT, key],
        )
      ).rows[0];
    for (const [i, outcome] of charges) {
      const customer = `cus_ha_${i}`;
      const { rows } = await db.query<{ id: string; psp_authorization: string | null }>(
        'SELECT id, psp_authorization FROM charges WHERE tenant_id = $1 AND customer = $2',
        [TENANT, customer],
      );
      // A second claim of the key would derive a second PSP key: a second authorization.
      const authorizations = (await (
        await fetch(`${psp.url}/v1/authorizations?customer=${customer}`)
      ).json()) as { id: string }[];
      if (rows.length !== 1) figures.violations.push(`charge intent ${i}: ${rows.length} charges`);
      if (authorizations.length !== 1)
        figures.violations.push(`charge intent ${i}: ${authorizations.length} PSP authorizations`);
      else if (rows[0]?.psp_authorization !== authorizations[0].id)
        figures.violations.push(`charge intent ${i}: the charge is not the PSP's authorization`);
      if (outcome.status === 201 && rows[0]?.id !== outcome.id)
        figures.violations.push(
          `charge intent ${i}: acknowledged ${outcome.id}, stored ${rows[0]?.id}`,
        );
      const key = await stored(`ha-${i}`);
      if (outcome.status === 201 && (key?.state !== 'done' || key.response_code !== 201))
        figures.violations.push(`charge intent ${i}: 201 given, stored ${JSON.stringify(key)}`);
    }
    for (const [i, outcome] of transfers) {
      const { rows } = await db.query<{ id: string }>(
        'SELECT id FROM transfers WHERE tenant_id = $1 AND from_customer = $2',
        [TENANT, `acc_ha_${i}`],
      );
      if (rows.length !== 1) figures.violations.push(`transfer ${i}: ${rows.length} transfers`);
      if (outcome.status === 201 && rows[0]?.id !== outcome.id)
        figures.violations.push(`transfer ${i}: acknowledged ${outcome.id}, stored ${rows[0]?.id}`);
      const key = await stored(`ha-${i}`);
      if (outcome.status === 201 && (key?.state !== 'done' || key.response_code !== 201))
        figures.violations.push(`transfer ${i}: 201 given, stored ${JSON.stringify(key)}`);
    }
    const { rows: errors } = await db.query<{ n: string }>(
      'SELECT count(*) AS n FROM idempotency_keys WHERE response_code >= 500',
    );
    if (errors[0].n !== '0') figures.violations.push(`${errors[0].n} stored 5xx answers`);
    const { rows: stuck } = await db.query<{ n: string }>(
      `SELECT count(*) AS n FROM idempotency_keys WHERE state = 'started'`,
    );
    if (stuck[0].n !== '0') figures.violations.push(`${stuck[0].n} keys left unfinished`);
    await db.end();

    console.log(
      `\ntest:ha ${ROUND}: ${((Date.now() - started) / 1000).toFixed(0)} s, ${figures.requests} requests, ${retries} retries, ${charges.size + transfers.size} intents answered`,
    );
    console.log(`answers: ${summary(figures.answers)}`);
    for (const failure of failures) {
      // The write outage of a failure: from the kill to the next successful write (the kill
      // may land a moment after it is asked for, and a write slip in before it).
      const gap = gaps.find((g) => g.to > failure.at && g.from <= failure.at + 2000);
      const back = gap?.to ?? failure.at;
      const during = figures.answers.filter((x) => x.at >= failure.at && x.at <= back);
      console.log(
        `${((failure.at - started) / 1000).toFixed(1)} s: ${failure.what}; write outage ${((back - failure.at) / 1000).toFixed(1)} s; answers then: ${summary(during)}`,
      );
    }
    console.log(`violations: ${figures.violations.length}`);
    for (const violation of figures.violations.slice(0, 30)) console.log(`  ${violation}`);
    return figures.violations.length === 0 ? 0 : 1;
  } finally {
    for (const instance of instances) await instance.kill('SIGTERM');
    await psp?.kill('SIGTERM');
    await cluster.stop();
  }
}

/** Answers counted by status, most frequent first. */
function summary(answers: { status: string }[]): string {
  const counts = new Map<string, number>();
  for (const { status } of answers) counts.set(status, (counts.get(status) ?? 0) + 1);
  return (
    [...counts]
      .sort((x, y) => y[1] - x[1])
      .map(([status, n]) => `${status}: ${n}`)
      .join(', ') || 'none'
  );
}

process.exitCode = await main();
