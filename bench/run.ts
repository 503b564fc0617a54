/**
 * `npm run bench`: the library's cost, measured as ratios in one run on one machine.
 *
 * For each adapter, the same app process serves in turn: the plain route (the baseline), the
 * idempotent route with a new key per request, and the idempotent route replaying keys that
 * are done. Each phase is repeated and interleaved (plain, new, replay, plain, new, ...) so that
 * the noise of a shared machine falls on every variant alike; the medians are reported.
 */
import autocannon from 'autocannon';
import { Client } from 'pg';
import { createTestDatabase } from '../test/support/database.js';
import { startWorker } from '../test/support/worker-process.js';
import { startEmbeddedPostgres } from '../sample-app/database/embedded-postgres.js';

const DURATION_S = Number(process.env.BENCH_SECONDS ?? 5);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 3);
const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 32);
const body = JSON.stringify({ amount: 1999, customer: 'cus_bench' });

function run(url: string, path: string, key: (i: number) => string | undefined) {
  let i = 0;
  return new Promise<autocannon.Result>((resolve, reject) => {
    const instance = autocannon(
      {
        url,
        connections: CONNECTIONS,
        duration: DURATION_S,
        requests: [
          {
            method: 'POST',
            path,
            setupRequest: (request) => {
              const k = key(i++);
              request.headers = {
                'content-type': 'application/json',
                ...(k ? { 'idempotency-key': k } : {}),
              };
              request.body = body;
              return request;
            },
          },
        ],
      },
      (error, result) => (error ? reject(error) : resolve(result)),
    );
    void instance;
  });
}

const median = (values: number[]) =>
  [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)];

async function main() {
  let adminUrl = process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL;
  const embedded = adminUrl ? undefined : await startEmbeddedPostgres();
  adminUrl ??= embedded!.url;
  process.env.TEST_DATABASE_URL = adminUrl;
  const lines: string[] = [];
  for (const adapter of ['express', 'fastify']) {
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
    });
    for (const [work, suffix] of [
      ['raw INSERT', ''],
      ['TypeORM save', '-orm'],
    ]) {
      const replayKeys = Array.from({ length: 64 }, (_, i) => `replay${suffix}-${i}`);
      for (const key of replayKeys) {
        await fetch(`${app.url}/idempotent${suffix}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', 'idempotency-key': key },
          body,
        });
      }
      const results: Record<string, number[]> = { plain: [], new: [], split: [], replay: [] };
      const errors: Record<string, number> = { plain: 0, new: 0, split: 0, replay: 0 };
      // A short warm-up of every path (JIT, prepared statements, pool connections).
      await run(app.url, `/plain${suffix}`, () => undefined);
      for (let round = 0; round < ROUNDS; round++) {
        const variants: [string, string, (i: number) => string | undefined][] = [
          ['plain', `/plain${suffix}`, () => undefined],
          ['new', `/idempotent${suffix}`, (i) => `new-${round}-${i}-${Math.random()}`],
          ['split', `/split${suffix}`, (i) => `split-${round}-${i}-${Math.random()}`],
          ['replay', `/idempotent${suffix}`, (i) => replayKeys[i % replayKeys.length]],
        ];
        for (const [name, path, key] of variants) {
          const result = await run(app.url, path, key);
          results[name].push(result.requests.average);
          errors[name] += result.errors + result.non2xx;
        }
      }
      const plain = median(results.plain);
      const fresh = median(results.new);
      const replay = median(results.replay);
      const split = median(results.split);
      lines.push(
        `${adapter.padEnd(8)} ${work.padEnd(13)} plain ${plain.toFixed(0).padStart(6)} req/s | new keys (atomic) ${fresh.toFixed(0).padStart(6)} req/s = ${(fresh / plain).toFixed(2)} x | new keys (atomic: false) ${split.toFixed(0).padStart(6)} req/s = ${(split / plain).toFixed(2)} x | atomic / two commits ${(fresh / split).toFixed(2)} | replays ${replay.toFixed(0).padStart(6)} req/s = ${(replay / plain).toFixed(2)} x | errors or non-2xx: ${JSON.stringify(errors)}`,
      );
      console.log(lines[lines.length - 1]);
    }
    await app.kill('SIGTERM');
    await db.end();
    await database.drop();
  }
  await embedded?.stop();
  console.log(`\n${lines.join('\n')}`);
  console.log(
    `\n${ROUNDS} interleaved rounds of ${DURATION_S} s, ${CONNECTIONS} connections; medians.`,
  );
  console.log('targets: new keys >= 0.75 x plain, replays >= 1.5 x plain');
}

await main();
