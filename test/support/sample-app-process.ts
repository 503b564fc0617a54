import { freePort } from '../../sample-app/database/embedded-postgres.js';
import { appDatabaseUrl } from './pgbouncer.js';
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
  /** `IDEMPOTENCY_HEARTBEAT`; the library's default (on) when not given. */
  heartbeat?: boolean;
  /** `PSP_TIMEOUT_MS`; the app's default (30 s) when not given. */
  pspTimeoutMs?: number;
  /** `IDEMPOTENCY_RETENTION_MS`; the contract's default (24 h) when not given. */
  retentionMs?: number;
  /** `IDEMPOTENCY_PURGE_INTERVAL_MS`; the contract's default (60 s) when not given. */
  purgeIntervalMs?: number;
  /** `TRANSFER_DELAY_MS`; the contract's default (0) when not given. */
  transferDelayMs?: number;
  /** `REQUEST_TIMEOUT_MS`; the contract's default (0, no timeout) when not given. */
  requestTimeoutMs?: number;
  /**
   * `DATABASE_POOLER` as given (any text, to test the refusal); not set when not given, but
   * `transaction` under `TEST_POOLER=pgbouncer`.
   */
  pooler?: string;
}

/**
 * Starts the compiled sample app (`dist/sample-app/main.js`) as a process of its own on a free
 * port, and resolves once it printed `listening on <port>`. Every setting is passed explicitly,
 * so that nothing leaks in from the environment the tests run in. Under `TEST_POOLER=pgbouncer`
 * an app of the test server goes through the test file's PgBouncer in transaction mode, with
 * `DATABASE_POOLER=transaction` (`TEST_POOLER=pgbouncer npm test -- test/sample-app`): every
 * black-box suite of the app then runs behind it.
 */
export async function startSampleApp(
  settings: SampleAppSettings,
  timeoutMs?: number,
): Promise<WorkerProcess> {
  const port = await freePort();
  const databaseUrl = await appDatabaseUrl(settings.databaseUrl);
  // Rerouted through the file's PgBouncer: the app is told so.
  const pooler = settings.pooler ?? (databaseUrl === settings.databaseUrl ? '' : 'transaction');
  return startWorker(
    'sample-app/main.js',
    {
      PORT: String(port),
      HTTP_ADAPTER: settings.adapter,
      DATABASE_URL: databaseUrl,
      DATABASE_POOLER: pooler,
      PSP_URL: settings.pspUrl,
      PSP_DELAY_MS: '0',
      IDEMPOTENCY_LEASE_MS: String(settings.leaseMs ?? 60_000),
      IDEMPOTENCY_HEARTBEAT: String(settings.heartbeat ?? true),
      PSP_TIMEOUT_MS: String(settings.pspTimeoutMs ?? 30_000),
      IDEMPOTENCY_RETENTION_MS: String(settings.retentionMs ?? 86_400_000),
      IDEMPOTENCY_PURGE_INTERVAL_MS: String(settings.purgeIntervalMs ?? 60_000),
      TRANSFER_DELAY_MS: String(settings.transferDelayMs ?? 0),
      REQUEST_TIMEOUT_MS: String(settings.requestTimeoutMs ?? 0),
    },
    // Behind a PgBouncer several instances queue for its few server connections to migrate.
    timeoutMs ?? (databaseUrl === settings.databaseUrl ? undefined : 90_000),
  );
}

/**
 * `npm start` with neither `DATABASE_URL` nor `PSP_URL` (nor `HTTP_ADAPTER`): the app starts an
 * embedded PostgreSQL and the fake PSP in its own process. Only `PORT` is set (a free port).
 * Stop it with `stopGracefully`, so that it stops its embedded PostgreSQL too.
 */
export async function startStandaloneApp(env: Record<string, string> = {}): Promise<WorkerProcess> {
  const port = await freePort();
  // Empty values are "not set" for the app, and override whatever the test run has.
  return startWorker(
    'sample-app/main.js',
    {
      PORT: String(port),
      DATABASE_URL: '',
      PSP_URL: '',
      HTTP_ADAPTER: '',
      PSP_DELAY_MS: '',
      PSP_TIMEOUT_MS: '',
      IDEMPOTENCY_LEASE_MS: '',
      IDEMPOTENCY_HEARTBEAT: '',
      IDEMPOTENCY_RETENTION_MS: '',
      IDEMPOTENCY_PURGE_INTERVAL_MS: '',
      TRANSFER_DELAY_MS: '',
      REQUEST_TIMEOUT_MS: '',
      DATABASE_POOLER: '',
      ...env,
    },
    90_000,
  );
}

/** `npm run psp`: the fake PSP as a process of its own, on `PSP_PORT`. */
export async function startStandalonePsp(delayMs: number): Promise<WorkerProcess> {
  const port = await freePort();
  return startWorker('sample-app/psp/main.js', {
    PSP_PORT: String(port),
    PSP_DELAY_MS: String(delayMs),
  });
}

/** SIGTERM, then SIGKILL if the process has not exited in time; says how it ended. */
export async function stopGracefully(
  worker: WorkerProcess,
  timeoutMs = 20_000,
): Promise<{ code: number | null; signal: NodeJS.Signals | null }> {
  const { child } = worker;
  let timer: NodeJS.Timeout | undefined;
  const killed = new Promise<void>((resolve) => {
    timer = setTimeout(() => void worker.kill('SIGKILL').then(resolve), timeoutMs);
  });
  await Promise.race([worker.kill('SIGTERM'), killed]);
  clearTimeout(timer);
  return { code: child.exitCode, signal: child.signalCode };
}

/** The same connection string, pointed at another host and port (a proxy in front of it). */
export function viaPort(url: string, port: number): string {
  const target = new URL(url);
  target.hostname = '127.0.0.1';
  target.port = String(port);
  return target.toString();
}
