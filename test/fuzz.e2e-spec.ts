import { createTestDatabase, type TestDatabase } from './support/database.js';
import { fuzz } from './fuzz/fuzz-runner.js';

/**
 * The handler fuzzer, seeded and bounded: generated handler programs (writes, failed
 * statements swallowed or thrown, nested transactions, waits, work left running, HTTP errors)
 * run under `@Idempotent()` with faults on their first attempts (outer timeouts, the app's
 * connections dropped, statement timeouts, racing duplicates, SIGKILLs of the app's process),
 * retried to a final answer and checked against the model in `fuzz/handler-program.ts`.
 * `npm run fuzz` runs it long, from a new seed each time.
 */
describe('handler programs under faults (seeded fuzz)', () => {
  let database: TestDatabase;

  beforeAll(async () => {
    database = await createTestDatabase('fuzz');
  });

  afterAll(() => database.drop());

  it.each([
    { seed: 1, runs: 30, sigkills: false },
    { seed: 2, runs: 12, sigkills: true },
  ])(
    'seed $seed: $runs programs, each exactly once or not at all (SIGKILLs: $sigkills)',
    async ({ seed, runs, sigkills }) => {
      const report = await fuzz({ databaseUrl: database.url, seed, runs, sigkills });
      expect(report.violations).toEqual([]);
      // The run covered what it is for: faults of every kind, and every kind of outcome.
      expect(report.programs).toBe(runs);
      expect(report.attempts).toBeGreaterThan(runs);
    },
    240_000,
  );
});
