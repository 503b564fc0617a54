/**
 * `npm run fuzz`: the handler fuzzer run long. FUZZ_RUNS programs (default 300) from FUZZ_SEED
 * (default: the time), SIGKILLs included; on TEST_DATABASE_URL or DATABASE_URL (a database of
 * its own is created there and dropped), else on an embedded PostgreSQL. Exits 1 on a violation.
 */
import { startEmbeddedPostgres } from '../../sample-app/database/embedded-postgres.js';
import { createTestDatabase } from '../support/database.js';
import { fuzz } from './fuzz-runner.js';

const given = process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL;
const embedded = given ? undefined : await startEmbeddedPostgres();
process.env.TEST_DATABASE_URL = given ?? embedded!.url;
const database = await createTestDatabase('fuzz');
const seed = Number(process.env.FUZZ_SEED ?? Date.now() % 1_000_000);
const runs = Number(process.env.FUZZ_RUNS ?? 300);
console.log(`fuzz: ${runs} programs from seed ${seed}`);
try {
  const report = await fuzz({
    databaseUrl: database.url,
    seed,
    runs,
    sigkills: process.env.FUZZ_SIGKILL !== '0',
    log: (line) => console.log(line),
  });
  console.log(JSON.stringify(report, null, 2));
  process.exitCode = report.violations.length ? 1 : 0;
} finally {
  await database.drop();
  await embedded?.stop();
}
