import { readFileSync } from 'node:fs';
import { Client } from 'pg';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { startWorker, type WorkerProcess } from './support/worker-process.js';

/**
 * Field middleware on an `@Idempotent()` mutation's answer: the answer commits with the
 * resolver's effects, its middleware outputs pending, and the operation's answer hook
 * completes it (lib/graphql/middleware-outputs.ts, output-paths.ts). A replay during that
 * window waits for the completion (in the same process, and in another); one after the first
 * process died between the two writes answers those fields `field_output_pending`, never
 * running the middleware, the mutation committed once. Real processes
 * (test/support/graphql-middleware-worker.ts), killed with SIGKILL.
 */
const sorted = [{ name: 'Ada' }, { name: 'Bo' }, { name: 'Cy' }];
const query = 'mutation { joinTeam { id members { name } } }';

describe('GraphQL field middleware: the pending window of its stored output', () => {
  let database: TestDatabase;
  let admin: Client;
  /** Slow middleware (700 ms), the default lease. */
  let slow: WorkerProcess;
  /** Another process on the same database: fast middleware, a 6 s lease (a 2 s wait). */
  let other: WorkerProcess;

  beforeAll(async () => {
    database = await createTestDatabase('gql_mw_outputs');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE memberships (id serial PRIMARY KEY)');
    const env = { DATABASE_URL: database.url };
    slow = await startWorker('test/support/graphql-middleware-worker.js', {
      ...env,
      SLOW_MS: '700',
    });
    other = await startWorker('test/support/graphql-middleware-worker.js', {
      ...env,
      SLOW_MS: '0',
      LEASE_MS: '6000',
    });
  }, 120_000);

  afterAll(async () => {
    await slow?.kill();
    await other?.kill();
    await admin?.end().catch(() => undefined);
    await database?.drop();
  }, 60_000);

  const post = async (url: string, key: string) => {
    const response = await fetch(`${url}/graphql`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ query }),
    });
    return (await response.json()) as Record<string, unknown>;
  };

  /** Resolves once the key's answer is committed (its outputs still pending, or not). */
  const committed = async (key: string) => {
    for (let i = 0; i < 400; i++) {
      const { rows } = await admin.query<{ state: string }>(
        'SELECT state FROM idempotency_keys WHERE key = $1',
        // The field's record: the key scoped to its mutation field.
        [`${key}:joinTeam`],
      );
      if (rows[0]?.state === 'done') return;
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    throw new Error(`${key} was never committed`);
  };

  const count = async () =>
    Number((await admin.query<{ n: string }>('SELECT count(*) AS n FROM memberships')).rows[0].n);

  const replayOf = (first: Record<string, unknown>) => ({
    ...first,
    extensions: { idempotency: { replayed: ['joinTeam'] } },
  });

  it.each([
    { name: 'in the same process', replayTo: () => slow.url },
    { name: 'in another process', replayTo: () => other.url },
  ])(
    'a replay during a slow answer $name waits, and gets the first answer',
    async ({ replayTo }) => {
      const key = `gql-mw-pending-${Math.random().toString(36).slice(2)}`;
      const before = await count();
      const firstCall = post(slow.url, key);
      await committed(key);
      // Committed, the middleware still running: the outputs are pending.
      const replay = await post(replayTo(), key);
      const first = await firstCall;
      expect(first).toEqual({ data: { joinTeam: { id: expect.any(Number), members: sorted } } });
      expect(replay).toEqual(replayOf(first));
      expect(await count()).toBe(before + 1);
    },
    60_000,
  );

  it('a replay after the first process died between the two writes: field_output_pending', async () => {
    const doomed = await startWorker('test/support/graphql-middleware-worker.js', {
      DATABASE_URL: database.url,
      SLOW_MS: '60000',
    });
    const key = 'gql-mw-pending-killed';
    const before = await count();
    const firstCall = post(doomed.url, key).catch((error: unknown) => error);
    try {
      await committed(key);
      await doomed.kill('SIGKILL');
    } finally {
      await doomed.kill();
    }
    // Its client got no answer (a fetch error, of another realm than jest's).
    expect(await firstCall).toHaveProperty('message');
    const began = performance.now();
    const replay = await post(other.url, key);
    // Waited (at most a third of the replaying route's lease), then answered without them.
    expect(performance.now() - began).toBeLessThan(5_000);
    expect(replay).toEqual({
      data: { joinTeam: { id: expect.any(Number), members: null } },
      errors: [
        expect.objectContaining({
          path: ['joinTeam', 'members'],
          extensions: expect.objectContaining({ code: 'field_output_pending' }),
        }),
      ],
      extensions: { idempotency: { replayed: ['joinTeam'] } },
    });
    expect((replay.errors as { message: string }[])[0].message).toContain(
      'Team.members runs field middleware, whose output was not stored',
    );
    // At once from then on, and the mutation ran once.
    const again = performance.now();
    await post(other.url, key);
    expect(performance.now() - again).toBeLessThan(1_500);
    expect(await count()).toBe(before + 1);
  }, 60_000);
});
