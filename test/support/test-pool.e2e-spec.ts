import { connect, createServer, type Server, type Socket } from 'node:net';
import { type Pool } from 'pg';
import { adminUrl, createTestDatabase, dropTestDatabase, type TestDatabase } from './database.js';
import { createTestPool, endTestPool } from './test-pool.js';

interface LateReader {
  port: number;
  /** From now on, what clients send reaches the server `ms` late. */
  delay(ms: number): void;
  stop(): Promise<void>;
}

/**
 * Between a pool and PostgreSQL: what the client sends can be made to reach the server late,
 * as on a busy machine where a backend has not read its Terminate yet; answers never are.
 */
async function startLateReader(): Promise<LateReader> {
  let late = 0;
  const sockets = new Set<Socket>();
  const server: Server = createServer({ allowHalfOpen: true }, (client) => {
    const target = new URL(adminUrl());
    const port = Number(target.port || 5432);
    const upstream = connect({ port, host: target.hostname, allowHalfOpen: true });
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
    }
    client.on('data', (data) => setTimeout(() => upstream.write(data), late));
    client.on('end', () => setTimeout(() => upstream.end(), late));
    upstream.on('data', (data) => client.write(data));
    upstream.on('end', () => client.end());
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const address = server.address();
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    delay: (ms) => (late = ms),
    stop: () => {
      for (const socket of sockets) socket.destroy();
      return new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

describe('ending a test pool before its database is dropped WITH (FORCE)', () => {
  let proxy: LateReader;
  beforeAll(async () => {
    proxy = await startLateReader();
  });
  afterAll(async () => {
    await proxy?.stop();
  });

  /** A pool through the late reader, one connection used; the pool's errors are collected. */
  async function usedPool(database: TestDatabase): Promise<{ pool: Pool; errors: string[] }> {
    const url = new URL(database.url);
    url.hostname = '127.0.0.1';
    url.port = String(proxy.port);
    proxy.delay(0);
    const pool = createTestPool({ connectionString: url.toString(), max: 1 });
    const errors: string[] = [];
    pool.on('error', (error: Error & { code?: string }) =>
      errors.push(error.code ?? error.message),
    );
    await pool.query('SELECT 1');
    // Long enough that the drop comes before the Terminate, even on a loaded machine.
    proxy.delay(1000);
    return { pool, errors };
  }

  it.each([
    [
      'pool.end() alone, dropped at once: the drop kills the backend that has not read Terminate (57P01)',
      'pool.end',
      0,
      ['57P01'],
    ],
    [
      "pool.end() alone, the database's drop(): it waits for that backend to go, and kills nobody",
      'pool.end',
      undefined,
      [],
    ],
    ['endTestPool: every socket closed first, the drop kills nobody', 'endTestPool', 0, []],
  ])('%s', async (_name, ending, dropWaitMs, expected) => {
    const database = await createTestDatabase('test_pool');
    const { pool, errors } = await usedPool(database);
    if (ending === 'endTestPool') await endTestPool(pool);
    else await pool.end();
    await dropTestDatabase(database.name, dropWaitMs);
    // Whatever the drop killed has said so by now: its FATAL comes back undelayed.
    await new Promise((resolve) => setTimeout(resolve, 100));
    expect(errors).toEqual(expected);
  });
});
