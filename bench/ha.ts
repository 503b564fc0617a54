/**
 * `npm run test:ha`: the sample app across a PostgreSQL failover, with its invariants checked
 * at the end. Not part of `npm test`: it brings up a pg_auto_failover cluster (installing the
 * Debian package when it is missing and it may), which takes a minute.
 *
 * Three sample-app instances (Express and Fastify) connect to both nodes and follow the
 * writable one (`postgresConnection()` of a multi-host URL); the fake PSP runs as its own
 * process; clients send charges and transfers, each intent by two racing clients that retry
 * with backoff and their key. Mid-run the primary is SIGKILLed (its keeper and its
 * PostgreSQL); the standby is promoted; the old primary's keeper is started again and it
 * rejoins as a standby; then a planned failover moves the primary back.
 *
 * At the end, from the new primary and the PSP: one charge and one PSP authorization per
 * charge intent, one transfer per transfer key, every acknowledged answer's row present, no
 * stored 500, no key left unfinished, and every instance still serving without a restart.
 * It prints its figures (requests, retries, the write outage in seconds, violations), cleans
 * up what it started, and exits non-zero on any violation; 0 with a message when the cluster
 * cannot be had here.
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
const TENANT = '9';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const started = Date.now();
const at = () => ((Date.now() - started) / 1000).toFixed(1);
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

/** Writes to the cluster every 100 ms: the seconds without a successful write. */
function outageProbe(url: string) {
  let last = Date.now();
  let longest = 0;
  let stopped = false;
  const loop = (async () => {
    while (!stopped) {
      const client = writableClient(url, true);
      try {
        await client.connect();
        await client.query('INSERT INTO ha_probe DEFAULT VALUES');
        longest = Math.max(longest, Date.now() - last);
        last = Date.now();
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
      return longest / 1000;
    },
  };
}

async function main() {
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
          PSP_TIMEOUT_MS: '5000',
          IDEMPOTENCY_PURGE_INTERVAL_MS: '3600000',
        }),
      );
    }
    const live = () => instances.map((w) => w.url);
    log(`3 instances and the PSP up; ${INTENTS} intents over ${SECONDS} s`);
    const probe = outageProbe(url);
    const client = new RetryingClient(figures, TENANT);
    const end = started + SECONDS * 1000 + 60_000;

    const chaos = (async () => {
      await sleep(SECONDS * 250);
      const first = (await cluster.primary())!;
      const other = cluster.nodes.find((n) => n.name !== first)!.name;
      log(`SIGKILL the primary, ${first} (its keeper and its PostgreSQL)`);
      const killedAt = Date.now();
      cluster.kill(first);
      await cluster.until(
        async () => (await cluster.primary()) === other,
        `${other} to be promoted`,
        120_000,
      );
      log(`${other} promoted after ${((Date.now() - killedAt) / 1000).toFixed(1)} s`);
      await sleep(SECONDS * 150);
      log(`${first} starts again`);
      cluster.restart(first);
      await cluster.until(() => cluster.settled(), `${first} to rejoin as a standby`, 180_000);
      log(`${first} rejoined as a standby`);
      await sleep(SECONDS * 100);
      log('planned failover back');
      const failoverAt = Date.now();
      cluster.failover();
      await cluster.until(
        async () => (await cluster.primary()) === first,
        `${first} to be primary again`,
        120_000,
      );
      log(`${first} primary again after ${((Date.now() - failoverAt) / 1000).toFixed(1)} s`);
    })();

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
          client.untilAnswered(live, path, { 'idempotency-key': key }, body, settle, end),
        ),
      );
      retries += (a?.attempts ?? 1) - 1 + (b?.attempts ?? 1) - 1;
      if (!a || !b) {
        figures.violations.push(`${key}: no final answer before the deadline`);
        return;
      }
      if (a.text !== b.text) figures.violations.push(`${key}: two answers for one key`);
      if (a.status === 422) figures.violations.push(`${key}: 422 for its own request`);
      const parsed = JSON.parse(a.text) as { id?: string };
      (isCharge ? charges : transfers).set(i, { status: a.status, id: parsed.id });
    });
    await Promise.all([chaos, ...intents]);
    const outage = await probe.stop();
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
    for (const [i, outcome] of charges) {
      const customer = `cus_ha_${i}`;
      const { rows } = await db.query<{ id: string }>(
        'SELECT id FROM charges WHERE tenant_id = $1 AND customer = $2',
        [TENANT, customer],
      );
      const authorizations = (await (
        await fetch(`${psp.url}/v1/authorizations?customer=${customer}`)
      ).json()) as unknown[];
      if (rows.length !== 1) figures.violations.push(`charge intent ${i}: ${rows.length} charges`);
      if (authorizations.length !== 1)
        figures.violations.push(`charge intent ${i}: ${authorizations.length} PSP authorizations`);
      if (outcome.status === 201 && rows[0]?.id !== outcome.id)
        figures.violations.push(
          `charge intent ${i}: acknowledged ${outcome.id}, stored ${rows[0]?.id}`,
        );
    }
    for (const [i, outcome] of transfers) {
      const { rows } = await db.query<{ id: string }>(
        'SELECT id FROM transfers WHERE tenant_id = $1 AND from_customer = $2',
        [TENANT, `acc_ha_${i}`],
      );
      if (rows.length !== 1) figures.violations.push(`transfer ${i}: ${rows.length} transfers`);
      if (outcome.status === 201 && rows[0]?.id !== outcome.id)
        figures.violations.push(`transfer ${i}: acknowledged ${outcome.id}, stored ${rows[0]?.id}`);
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
      `\ntest:ha: ${((Date.now() - started) / 1000).toFixed(0)} s, ${figures.requests} requests, ${retries} retries`,
    );
    console.log(`answers: ${[...figures.statuses].map(([s, n]) => `${s}: ${n}`).join(', ')}`);
    console.log(`longest time without a successful write: ${outage.toFixed(1)} s`);
    console.log(`violations: ${figures.violations.length}`);
    for (const violation of figures.violations.slice(0, 30)) console.log(`  ${violation}`);
    return figures.violations.length === 0 ? 0 : 1;
  } finally {
    for (const instance of instances) await instance.kill('SIGTERM');
    await psp?.kill('SIGTERM');
    await cluster.stop();
  }
}

process.exitCode = await main();
