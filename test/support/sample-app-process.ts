import { freePort } from '../../sample-app/database/embedded-postgres.js';
import { startWorker, type WorkerProcess } from './worker-process.js';

export type { WorkerProcess } from './worker-process.js';

export type SampleAppAdapter = 'express' | 'fastify';

/** What one instance of the sample app is started with (the contract's environment variables). */
export interface SampleAppSettings {
  adapter: SampleAppAdapter;
  databaseUrl: string;
  pspUrl: string;
  /** `IDEMPOTENCY_LEASE_MS`; the contract's default (60 s) when not given. */
  leaseMs?: number;
  /** `PSP_TIMEOUT_MS`; the app's default (30 s) when not given. */
  pspTimeoutMs?: number;
}

/**
 * Starts the compiled sample app (`dist/sample-app/main.js`) as a process of its own on a free
 * port, and resolves once it printed `listening on <port>`. Every setting is passed explicitly,
 * so that nothing leaks in from the environment the tests run in.
 */
export async function startSampleApp(settings: SampleAppSettings): Promise<WorkerProcess> {
  const port = await freePort();
  return startWorker('sample-app/main.js', {
    PORT: String(port),
    HTTP_ADAPTER: settings.adapter,
    DATABASE_URL: settings.databaseUrl,
    PSP_URL: settings.pspUrl,
    IDEMPOTENCY_LEASE_MS: String(settings.leaseMs ?? 60_000),
    PSP_TIMEOUT_MS: String(settings.pspTimeoutMs ?? 30_000),
    IDEMPOTENCY_RETENTION_MS: '86400000',
    IDEMPOTENCY_PURGE_INTERVAL_MS: '60000',
  });
}

/** The same connection string, pointed at another host and port (a proxy in front of it). */
export function viaPort(url: string, port: number): string {
  const target = new URL(url);
  target.hostname = '127.0.0.1';
  target.port = String(port);
  return target.toString();
}
