import { type LayerName } from '../fuzz/data-layers.js';
import { type TransportName } from '../fuzz/fuzz-app.js';
import { fuzz } from '../fuzz/fuzz-runner.js';
import { createTestDatabase, type TestDatabase } from '../support/database.js';

/**
 * The handler fuzzer, seeded and bounded: generated handler programs (writes, failed
 * statements swallowed or thrown, nested transactions, waits, work left running, HTTP errors,
 * reads through the layer's read API, advisory locks, SET LOCAL in nested transactions,
 * outside(), cursors, array transactions, odd tenants, SERIALIZABLE routes; on GraphQL, Dates,
 * BigInts, aliases and a failing field beside) run under `@Idempotent()` on each data layer,
 * with faults on their first attempts (outer timeouts, the app's connections dropped,
 * statement timeouts, racing duplicates, a crowd of copies for other tenants, SIGKILLs of the
 * app's process), retried to a final answer and checked against the model in
 * `fuzz/handler-program.ts`. A fixed set of short seeds, one per data layer (about 10 s each
 * when nothing fails); `npm run fuzz` runs it long, from a new seed each time.
 */
describe('handler programs under faults (seeded fuzz)', () => {
  let database: TestDatabase | undefined;

  afterEach(async () => {
    await database?.drop();
    database = undefined;
  });

  it.each<{
    layer: LayerName;
    transport: TransportName;
    seed: number;
    runs: number;
    sigkills: boolean;
  }>([
    { layer: 'typeorm', transport: 'http', seed: 1, runs: 6, sigkills: true },
    // Seeds picked for what their five programs hold: a cursor, SET LOCAL ROLE, a crowd, an
    // outer timeout (pg 11, kysely 43); a session lock under a crowd (prisma 36); a Date field,
    // SET LOCAL ROLE and an outer timeout on GraphQL (drizzle 8).
    { layer: 'pg', transport: 'http', seed: 11, runs: 5, sigkills: false },
    { layer: 'prisma', transport: 'http', seed: 36, runs: 5, sigkills: false },
    { layer: 'drizzle', transport: 'graphql', seed: 8, runs: 5, sigkills: false },
    { layer: 'kysely', transport: 'http', seed: 43, runs: 5, sigkills: false },
  ])(
    '$layer over $transport, seed $seed: $runs programs, each exactly once or not at all (SIGKILLs: $sigkills)',
    async ({ layer, transport, seed, runs, sigkills }) => {
      database = await createTestDatabase(`fuzz_${layer}`);
      const report = await fuzz({
        databaseUrl: database.url,
        seed,
        runs,
        sigkills,
        layer,
        transport,
        // A hang is found in 15 s, not 40: the seeds stay short when something is wrong.
        budgetMs: 15_000,
      });
      expect(report.violations).toEqual([]);
      // The run covered what it is for: every program, retried past its faults.
      expect(report.programs).toBe(runs);
      expect(report.attempts).toBeGreaterThan(runs);
    },
    240_000,
  );
});
