import { Logger } from '@nestjs/common';
import { type Pool, type PoolClient } from 'pg';
import { withDeadline } from '../connection/deadline.js';
import { keepOwnConnect } from '../connection/own-connection.js';
import { transactionScope } from './transaction-scope.js';

const logger = new Logger('Idempotency');
/** Pools already warned of: once each, not once per request. */
const warnedPools = new WeakSet<object>();

type Callback = (...results: unknown[]) => void;

/**
 * A connection of `pool` for work in `IdempotentTransaction.outside()` that its request awaits
 * while holding a connection of the same pool (see `OutsideScope`): waited for at most
 * `timeoutMs`, then a `DatabaseDeadlineError` (503 `store_unavailable` if the handler lets it
 * through). One that arrives after goes straight back to the pool, unused. With `callback`
 * (node-postgres' callback form, which `pool.query()` uses), answered there instead.
 */
export function connectWithin(
  pool: { options?: { max?: number } },
  connect: () => Promise<PoolClient>,
  timeoutMs: number,
  callback?: Callback,
): Promise<PoolClient> | undefined {
  const connecting = connect();
  const bounded = withDeadline(connecting, timeoutMs, WAIT, () => {
    warn(pool, timeoutMs);
    connecting.then(
      (client) => client.release(),
      () => undefined,
    );
  });
  if (!callback) return bounded;
  bounded.then(
    (client) => callback(undefined, client, (error?: Error) => client.release(error)),
    (error: unknown) => callback(error),
  );
  return undefined;
}

/**
 * Makes `pool.connect()` (and so `pool.query()`) bounded in an `OutsideScope`, as the pool
 * seam's joined pools are: for a pool the library does not join, TypeORM's. Installed once per
 * pool, when work in `outside()` first asks the DataSource for a runner; the library's own
 * connections keep the pool's `connect` as it was (see `connectOwn`).
 */
export function boundOutsideWaits(pool: Pool): void {
  if (!keepOwnConnect(pool)) return;
  const connect = pool.connect as (...args: unknown[]) => unknown;
  (pool as unknown as { connect: unknown }).connect = function boundedConnect(
    this: Pool,
    ...args: unknown[]
  ): unknown {
    const deadline = transactionScope.getStore()?.connectDeadline?.(this);
    if (deadline === undefined) return connect.apply(this, args);
    const callback = typeof args[0] === 'function' ? (args[0] as Callback) : undefined;
    return connectWithin(this, () => connect.call(this) as Promise<PoolClient>, deadline, callback);
  };
}

const WAIT =
  'IdempotentTransaction.outside() waiting for a connection of the pool while its request ' +
  'holds one';

function warn(pool: { options?: { max?: number } }, timeoutMs: number): void {
  if (warnedPools.has(pool)) return;
  warnedPools.add(pool);
  logger.warn(
    `Work awaited in IdempotentTransaction.outside() waited ${timeoutMs} ms for a connection ` +
      `of a pool (max ${pool.options?.max ?? '?'}) while its request holds another of the same ` +
      'pool: when every connection is held by requests waiting so, none is given back. The ' +
      'request rolls back and answers 503. Give the pool more connections than requests run ' +
      'at once, give that work a pool of its own, or leave it unawaited (it then runs once ' +
      'the request has given its connection back).',
  );
}
