/**
 * `npm run soak`: the sample app under fire, with its invariants checked at the end.
 *
 * Three sample-app instances on one PostgreSQL of its own (embedded, so that it can be
 * restarted), the fake PSP as its own process, and many clients that retry with backoff and
 * share keys (two clients per intent, racing), while instances are SIGKILLed and restarted,
 * PostgreSQL is restarted once and the PSP turns slow for a while. Each intent is a charge;
 * each charge that succeeds gets a refund webhook, delivered twice at once and again on 503.
 *
 * At the end, from PostgreSQL and the PSP: one charge and one authorization per intent, every
 * refund applied once, no 5xx but documented 503s, no key left unfinished. Bounded in time
 * (`SOAK_SECONDS`, 60 by default), it cleans up what it started, prints its figures and exits
 * non-zero on any violation.
 */
import { Client } from 'pg';
import { MIGRATIONS } from '../sample-app/app.module.js';
import { freePort, startEmbeddedPostgres } from '../sample-app/database/embedded-postgres.js';
import { migrate } from '../sample-app/database/migrate.js';
import { startWorker, type WorkerProcess } from '../test/support/worker-process.js';
import { newFigures, RetryingClient } from './support/retrying-client.js';

const SECONDS = Number(process.env.SOAK_SECONDS ?? 60);
const INTENTS = Number(process.env.SOAK_INTENTS ?? 400);
const TENANT = '7';
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const figures = newFigures();
const client = new RetryingClient(figures, TENANT);
const started = Date.now();
const log = (event: string) =>
  console.log(`${((Date.now() - started) / 1000).toFixed(1)}s ${event}`);

async function main() {
  const database = await startEmbeddedPostgres();
  const url = database.url;
  await migrate({ type: 'postgres', url, migrations: MIGRATIONS });
  const psp = await startWorker('bench/soak-psp.js', { PSP_PORT: '0', PSP_SLOW_MS: '3000' });
  const instances: (WorkerProcess | undefined)[] = [undefined, undefined, undefined];
  const ports = await Promise.all(instances.map(() => freePort()));
  const start = async (i: number) => {
    instances[i] = await startWorker('sample-app/main.js', {
      PORT: String(ports[i]),
      DATABASE_URL: url,
      PSP_URL: psp.url,
      HTTP_ADAPTER: i === 1 ? 'fastify' : 'express',
      IDEMPOTENCY_LEASE_MS: '3000',
      PSP_TIMEOUT_MS: '2000',
      IDEMPOTENCY_PURGE_INTERVAL_MS: '3600000',
    });
  };
  await Promise.all(instances.map((_, i) => start(i)));
  const live = () => instances.filter((w): w is WorkerProcess => !!w).map((w) => w.url);
  log(`3 instances, PostgreSQL and the PSP up; ${INTENTS} intents over ${SECONDS} s`);

  const end = started + SECONDS * 1000;
  // Chaos, spread over the first half of the run, so that the rest can settle.
  const chaos = (async () => {
    const at = (fraction: number) =>
      sleep(Math.max(0, started + SECONDS * 1000 * fraction - Date.now()));
    for (const [fraction, i] of [
      [0.1, 0],
      [0.2, 1],
    ] as const) {
      await at(fraction);
      log(`SIGKILL instance ${i}`);
      const doomed = instances[i];
      instances[i] = undefined;
      await doomed?.kill('SIGKILL');
      await sleep(1500);
      await start(i);
      log(`instance ${i} back`);
    }
    await at(0.3);
    log('PostgreSQL restarts');
    await database.restart();
    log('PostgreSQL back');
    await at(0.4);
    psp.child.kill('SIGUSR2');
    log('the PSP turns slow (3 s, over the app’s 2 s timeout)');
    await sleep(4000);
    psp.child.kill('SIGUSR1');
    log('the PSP is fast again');
  })();

  // Intents arrive over the first half; two clients race on each.
  const outcomes = new Map<number, { status: number; body: { id?: string; status?: string } }>();
  const intents = Array.from({ length: INTENTS }, async (_, i) => {
    await sleep((i / INTENTS) * SECONDS * 500);
    const key = `soak-${i}`;
    const body = { amount: 1000 + i, currency: 'eur', customer: `cus_soak_${i}` };
    const settle = (status: number) => status === 201 || status === 402 || status === 422;
    const [a, b] = await Promise.all([
      client.untilAnswered(live, '/charges', { 'idempotency-key': key }, body, settle, end),
      client.untilAnswered(live, '/charges', { 'idempotency-key': key }, body, settle, end),
    ]);
    if (!a || !b) return;
    if (a.text !== b.text) figures.violations.push(`intent ${i}: two answers for one key`);
    if (a.status === 422) figures.violations.push(`intent ${i}: 422 for its own request`);
    const parsed = JSON.parse(a.text) as { id?: string; status?: string };
    outcomes.set(i, { status: a.status, body: parsed });
    if (a.status !== 201 || !parsed.id) return;
    // The PSP's refund webhook, delivered twice at once, and again on anything but 200.
    const event = { id: `evt_soak_${i}`, type: 'refund', charge: parsed.id, amount: 100 };
    await Promise.all(
      [0, 1].map(() =>
        client.untilAnswered(live, '/webhooks/psp', {}, event, (status) => status === 200, end),
      ),
    );
  });
  await Promise.all([chaos, ...intents]);
  log(`clients done; ${outcomes.size} of ${INTENTS} intents answered`);

  // Invariants, from the database and the PSP.
  const db = new Client({ connectionString: url });
  await db.connect();
  for (let i = 0; i < INTENTS; i++) {
    const customer = `cus_soak_${i}`;
    const outcome = outcomes.get(i);
    if (!outcome) {
      figures.violations.push(`intent ${i}: no final answer before the deadline`);
      continue;
    }
    const { rows: charges } = await db.query<{ id: string; amount_refunded: string }>(
      'SELECT id, amount_refunded FROM charges WHERE tenant_id = $1 AND customer = $2',
      [TENANT, customer],
    );
    const authorizations = (await (
      await fetch(`${psp.url}/v1/authorizations?customer=${customer}`)
    ).json()) as unknown[];
    if (charges.length !== 1) figures.violations.push(`intent ${i}: ${charges.length} charges`);
    if (authorizations.length !== 1) {
      figures.violations.push(`intent ${i}: ${authorizations.length} PSP authorizations`);
    }
    if (outcome.status === 201 && charges[0] && charges[0].amount_refunded !== '100') {
      figures.violations.push(`intent ${i}: refunded ${charges[0].amount_refunded}, not 100`);
    }
  }
  const { rows: stuck } = await db.query<{ n: string }>(
    `SELECT count(*) AS n FROM idempotency_keys WHERE state = 'started'`,
  );
  if (stuck[0].n !== '0') figures.violations.push(`${stuck[0].n} keys left unfinished`);
  await db.end();

  for (const instance of instances) await instance?.kill('SIGTERM');
  await psp.kill('SIGTERM');
  await database.stop();

  console.log(
    `\nsoak: ${((Date.now() - started) / 1000).toFixed(0)} s, ${figures.requests} requests`,
  );
  console.log(`answers: ${[...figures.statuses].map(([s, n]) => `${s}: ${n}`).join(', ')}`);
  console.log(`violations: ${figures.violations.length}`);
  for (const violation of figures.violations.slice(0, 30)) console.log(`  ${violation}`);
  process.exit(figures.violations.length === 0 ? 0 : 1);
}

await main();
