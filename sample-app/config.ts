/** The sample app's settings, read once from the environment (the contract's table). */
export interface SampleAppConfig {
  port: number;
  databaseUrl?: string;
  pspUrl?: string;
  pspDelayMs: number;
  /** Not in the contract's table: how long a PSP call may take before the answer is 503. */
  pspTimeoutMs: number;
  leaseMs: number;
  /** Whether a live instance renews its lease (the library's default: on). */
  heartbeat: boolean;
  retentionMs: number;
  purgeIntervalMs: number;
  transferDelayMs: number;
  /** 0: no global timeout. */
  requestTimeoutMs: number;
  adapter: 'express' | 'fastify';
  /**
   * `DATABASE_POOLER`: `transaction` when `DATABASE_URL` is a pooler in transaction mode;
   * `none` leaves the library to find out at start-up (it adapts to a pooler it meets).
   */
  pooler: 'none' | 'transaction';
}

/** Thrown for a setting that cannot be used; the message names the variable and the fix. */
export class ConfigError extends Error {}

function integer(env: NodeJS.ProcessEnv, name: string, fallback: number, min = 0): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  const value = Number(raw);
  if (!Number.isSafeInteger(value) || value < min) {
    throw new ConfigError(`${name} must be an integer >= ${min}, got "${raw}"`);
  }
  return value;
}

function flag(env: NodeJS.ProcessEnv, name: string, fallback: boolean): boolean {
  const raw = env[name];
  if (raw === undefined || raw === '') return fallback;
  if (raw !== 'true' && raw !== 'false') {
    throw new ConfigError(`${name} must be "true" or "false", got "${raw}"`);
  }
  return raw === 'true';
}

export function readConfig(env: NodeJS.ProcessEnv): SampleAppConfig {
  const adapter = env.HTTP_ADAPTER || 'express';
  if (adapter !== 'express' && adapter !== 'fastify') {
    throw new ConfigError(`HTTP_ADAPTER must be "express" or "fastify", got "${adapter}"`);
  }
  const pooler = env.DATABASE_POOLER || 'none';
  if (pooler !== 'none' && pooler !== 'transaction') {
    throw new ConfigError(`DATABASE_POOLER must be "transaction" or "none", got "${pooler}"`);
  }
  return {
    port: integer(env, 'PORT', 3000),
    databaseUrl: env.DATABASE_URL || undefined,
    pspUrl: env.PSP_URL ? env.PSP_URL.replace(/\/+$/, '') : undefined,
    pspDelayMs: integer(env, 'PSP_DELAY_MS', 0),
    pspTimeoutMs: integer(env, 'PSP_TIMEOUT_MS', 30_000, 1),
    leaseMs: integer(env, 'IDEMPOTENCY_LEASE_MS', 60_000, 1),
    heartbeat: flag(env, 'IDEMPOTENCY_HEARTBEAT', true),
    retentionMs: integer(env, 'IDEMPOTENCY_RETENTION_MS', 86_400_000, 1),
    purgeIntervalMs: integer(env, 'IDEMPOTENCY_PURGE_INTERVAL_MS', 60_000, 1),
    transferDelayMs: integer(env, 'TRANSFER_DELAY_MS', 0),
    requestTimeoutMs: integer(env, 'REQUEST_TIMEOUT_MS', 0),
    adapter,
    pooler,
  };
}
