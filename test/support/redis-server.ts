import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { Redis, type RedisOptions } from 'ioredis';
import { freePort } from '../../sample-app/database/embedded-postgres.js';

/**
 * A Redis server of the test's own, on a free port, keeping nothing on disk (as this
 * machine's and most caches' are): it can be restarted without touching anyone else's data.
 */
export interface TestRedis {
  port: number;
  url: string;
  /** A client of the test's; closed by `stop()`. `options` replace the test's defaults. */
  client(options?: RedisOptions): Redis;
  /**
   * Freezes the server for `ms` (SIGSTOP, then SIGCONT): its connections stay open and what is
   * sent meanwhile waits in them, and runs when it wakes, as behind a slow command or a pause
   * of its host. Resolves once it answers again.
   */
  pause(ms: number): Promise<void>;
  /** Kills the server (SIGKILL), leaving the port closed until `up()`. */
  down(): Promise<void>;
  /** Starts an empty server on the same port again. */
  up(): Promise<void>;
  /** Kills the server (SIGKILL: no chance to save) and starts an empty one on the same port. */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** Whether `redis-server` is installed: where it is not, outside CI, the Redis tests skip. */
export function redisServerInstalled(): boolean {
  return spawnSync('redis-server', ['--version']).status === 0;
}

export async function startTestRedis(): Promise<TestRedis> {
  const port = await freePort();
  const clients: Redis[] = [];
  let server: ChildProcess | undefined;
  const start = async () => {
    server = spawn(
      'redis-server',
      ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'],
      { stdio: 'ignore' },
    );
    const probe = new Redis({ port, lazyConnect: true, retryStrategy: () => null });
    for (let attempt = 0; ; attempt++) {
      try {
        await probe.connect();
        await probe.ping();
        break;
      } catch (error) {
        if (attempt > 100) throw error;
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
    }
    probe.disconnect();
  };
  const kill = async () => {
    const running = server;
    if (!running || running.exitCode !== null) return;
    await new Promise<void>((resolve) => {
      running.once('exit', () => resolve());
      running.kill('SIGKILL');
    });
  };
  await start();
  return {
    port,
    url: `redis://127.0.0.1:${port}`,
    client: (options?: RedisOptions) => {
      const client = new Redis({ port, maxRetriesPerRequest: 3, ...options });
      clients.push(client);
      return client;
    },
    pause: async (ms: number) => {
      const running = server!;
      running.kill('SIGSTOP');
      await new Promise((resolve) => setTimeout(resolve, ms));
      running.kill('SIGCONT');
      const probe = new Redis({ port, retryStrategy: () => null });
      try {
        await probe.ping();
      } finally {
        probe.disconnect();
      }
    },
    down: kill,
    up: start,
    restart: async () => {
      await kill();
      await start();
    },
    stop: async () => {
      for (const client of clients) client.disconnect();
      await kill();
    },
  };
}
