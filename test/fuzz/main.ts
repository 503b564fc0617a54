/**
 * `npm run fuzz`: the handler fuzzer run long, per data layer and transport. Settings from
 * arguments (`--layer=prisma,drizzle --transport=graphql --runs=100 --seed=7 --seconds=300`) or
 * the environment (FUZZ_LAYER, FUZZ_TRANSPORT, FUZZ_RUNS, FUZZ_SEED, FUZZ_SECONDS, FUZZ_ONLY,
 * FUZZ_SIGKILL=0, FUZZ_DEFAULT_SERIALIZABLE=1, FUZZ_BUDGET_MS, FUZZ_VIA, FUZZ_PLAIN_JOBS=1: bullmq's
 * processor without `@IdempotentJob()`, the control):
 *
 * - layer: typeorm, pg, prisma, drizzle, kysely, or all (the default);
 * - transport: http, graphql (Apollo on Express), mercurius (Mercurius on Fastify), rabbitmq (a
 *   consumer, on the RabbitMQ of 127.0.0.1:5672), bullmq (an `@IdempotentJob()` processor, on
 *   the Redis of REDIS_URL, else 127.0.0.1:6379), or all (the default);
 * - via (rabbitmq only): message (`@IdempotentMessage`) or once (`processOnce()`); by default
 *   one program in three the latter;
 * - runs: programs per seed (default 100); seed: the first seed (default: the clock);
 * - seconds: when given, each layer and transport runs seed after seed until its share of it
 *   is spent; else one seed each.
 *
 * On TEST_DATABASE_URL or DATABASE_URL (a database of its own per layer and transport is
 * created there and dropped), else on an embedded PostgreSQL. Prints per data layer: programs,
 * attempts per fault, violations with a line that reproduces each. Exits 1 on a violation.
 */
import { startEmbeddedPostgres } from '../../sample-app/database/embedded-postgres.js';
import { createTestDatabase } from '../support/database.js';
import { LAYERS, type LayerName } from './data-layers.js';
import { TRANSPORTS, type TransportName } from './fuzz-app.js';
import { type Via } from './fuzz-consumer.js';
import { type Fault, fuzz, type FuzzReport } from './fuzz-runner.js';
import { type HandlerProgram } from './handler-program.js';

const args = new Map(
  process.argv
    .slice(2)
    .map((arg) => /^--([a-z-]+)=(.*)$/.exec(arg))
    .filter((match) => match !== null)
    .map((match) => [match[1], match[2]]),
);
const setting = (name: string, env: string) => args.get(name) ?? process.env[env];
const listOf = <T extends string>(given: string | undefined, all: T[]): T[] => {
  if (!given || given === 'all') return all;
  const chosen = given.split(',') as T[];
  for (const name of chosen) if (!all.includes(name)) throw new Error(`unknown: ${name}`);
  return chosen;
};
const layers = listOf<LayerName>(setting('layer', 'FUZZ_LAYER'), LAYERS);
const transports = listOf<TransportName>(setting('transport', 'FUZZ_TRANSPORT'), TRANSPORTS);
const runs = Number(setting('runs', 'FUZZ_RUNS') ?? 100);
const firstSeed = Number(setting('seed', 'FUZZ_SEED') ?? Date.now() % 1_000_000);
const seconds = Number(setting('seconds', 'FUZZ_SECONDS') ?? 0);
const only = setting('only', 'FUZZ_ONLY');
const via = setting('via', 'FUZZ_VIA') as Via | undefined;
if (via !== undefined && via !== 'message' && via !== 'once') throw new Error(`unknown: ${via}`);
/** FUZZ_PROGRAM='{"ops":[...]}' FUZZ_FAULTS='[{"kind":"crowd"}]': one program written by hand. */
const handWrittenJson = setting('program', 'FUZZ_PROGRAM');
const handWritten = handWrittenJson
  ? {
      program: JSON.parse(handWrittenJson) as Omit<HandlerProgram, 'id'>,
      faults: JSON.parse(setting('faults', 'FUZZ_FAULTS') ?? '[]') as Fault[],
    }
  : undefined;
const share = (seconds * 1000) / (layers.length * transports.length);

const given = process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL;
const embedded = given ? undefined : await startEmbeddedPostgres();
process.env.TEST_DATABASE_URL = given ?? embedded!.url;
console.log(
  `fuzz: ${layers.join(',')} over ${transports.join(',')}, ${runs} programs a seed from seed ${firstSeed}` +
    (seconds ? `, ${seconds} s` : ''),
);
const reports: FuzzReport[] = [];
try {
  for (const layer of layers) {
    for (const transport of transports) {
      const until = Date.now() + share;
      let seed = firstSeed;
      do {
        const database = await createTestDatabase(`fuzz_${layer}_${transport}`);
        try {
          const report = await fuzz({
            databaseUrl: database.url,
            seed,
            runs,
            layer,
            transport,
            sigkills: setting('sigkill', 'FUZZ_SIGKILL') !== '0',
            defaultSerializable:
              setting('default-serializable', 'FUZZ_DEFAULT_SERIALIZABLE') === '1',
            oneCommit: setting('one-commit', 'FUZZ_ONE_COMMIT') === '1',
            only: only === undefined ? undefined : Number(only),
            via,
            plainJobs: setting('plain-jobs', 'FUZZ_PLAIN_JOBS') === '1',
            program: handWritten,
            budgetMs: Number(setting('budget-ms', 'FUZZ_BUDGET_MS') ?? 40_000),
            log: (line) => console.log(`[${layer}/${transport} seed ${seed}] ${line}`),
          });
          reports.push(report);
          console.log(summary(report));
        } finally {
          await database.drop();
        }
        seed += 1;
      } while (Date.now() < until && only === undefined && !handWritten);
    }
  }
} finally {
  await embedded?.stop();
}
console.log('\nper data layer:');
for (const layer of layers) {
  const of = reports.filter((report) => report.layer === layer);
  const faults: Record<string, number> = {};
  const chains: Record<string, number> = {};
  for (const report of of) {
    for (const [kind, n] of Object.entries(report.faults)) faults[kind] = (faults[kind] ?? 0) + n;
    for (const [kind, n] of Object.entries(report.chains)) chains[kind] = (chains[kind] ?? 0) + n;
  }
  const violations = of.flatMap((report) => report.violations);
  console.log(
    `${layer}: ${sum(of, 'programs')} programs (+${sum(of, 'crowdPrograms')} crowd copies), ` +
      `${sum(of, 'attempts')} attempts (${Object.entries(faults)
        .map(([kind, n]) => `${kind} ${n}`)
        .join(', ')}; app chains: ${Object.entries(chains)
        .map(([kind, n]) => `${kind} ${n}`)
        .join(', ')}), ${violations.length} violations`,
  );
  for (const v of violations)
    console.log(`  #${v.index} ${v.what}\n    ${v.program} [${v.faults}]\n    ${v.reproduce}`);
}
process.exitCode = reports.some((report) => report.violations.length) ? 1 : 0;

function sum(of: FuzzReport[], key: 'programs' | 'crowdPrograms' | 'attempts'): number {
  return of.reduce((total, report) => total + report[key], 0);
}

function summary(report: FuzzReport): string {
  return (
    `${report.layer}/${report.transport} seed ${report.seed}: ${report.programs} programs ` +
    `(+${report.crowdPrograms} crowd), ${report.attempts} attempts, ` +
    `${report.violations.length} violations, ${report.seconds} s`
  );
}
