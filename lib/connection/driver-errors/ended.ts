/**
 * A data layer's own error for a call made once the app began to stop: the pool or driver
 * under it was ended while a request (or a delivery) was still running. Nothing of that work
 * is final and another instance answers its retry, so the library answers it as an outage
 * (503 with Retry-After), never as the handler's stored 500. Each is read by its exact shape,
 * since the library imports none of the data layers:
 * - Kysely's `Error('driver has already been destroyed')` (its runtime driver and its
 *   PostgresDriver, after `db.destroy()`);
 * - TypeORM's `TypeORMError('Driver not Connected')` (after `dataSource.destroy()`).
 * pg-pool's own ("Cannot use a pool after calling end on the pool") is one of node-postgres'
 * messages (connection-errors.ts).
 */
const ENDED: ReadonlyArray<{ name: string; message: string }> = [
  { name: 'Error', message: 'driver has already been destroyed' },
  { name: 'TypeORMError', message: 'Driver not Connected' },
];

/**
 * The library's own "the app's data layer is gone": TypeORM's DataSource no longer initialized
 * when a request asks for its pool (it is destroyed as the app stops; Nest initializes it
 * before any request is served).
 */
export class DataLayerEndedError extends Error {
  constructor(what: string) {
    super(`${what}: it was ended (the app is stopping)`);
    this.name = 'DataLayerEndedError';
  }
}

/** Whether `error` is a data layer's "I was ended" (see above). */
export function isEndedDataLayer(error: unknown): boolean {
  if (error instanceof DataLayerEndedError) return true;
  if (typeof error !== 'object' || error === null) return false;
  const { name, message } = error as { name?: unknown; message?: unknown };
  return ENDED.some((ended) => ended.name === name && ended.message === message);
}
