import { transactionScope } from '../../transaction/transaction-scope.js';
import { type PrismaDataLoader, prismaBatchingOf } from './prisma-batching.js';
import { PrismaBatchingUnknownError } from './prisma-batching-unknown.error.js';

type LoaderClass = new (options: object) => PrismaDataLoader;

/** The DataLoader classes made to batch per scope (one per copy of Prisma's runtime). */
const keptClasses = new WeakSet<object>();
/** Each scope's own DataLoader, per client's (shared) DataLoader. */
const loadersOfScope = new WeakMap<object, WeakMap<object, PrismaDataLoader>>();

/**
 * Makes Prisma batch per transaction scope: a call made inside a request's (or a phase's)
 * scope is queued on a DataLoader of that scope's own, never beside another request's calls,
 * and that loader's `process.nextTick` is scheduled by a call of the same scope, so the batch
 * runs in that scope's async context and its statements go to that scope's transaction.
 *
 * Without it, Prisma queues every batched call of a tick on one DataLoader and sends them all
 * from a `process.nextTick` of the first caller: another request's `findUnique` then runs in
 * the first request's transaction (compacted with its reads into one `SELECT ... IN`), and an
 * array `$transaction` queued in that tick becomes a savepoint of the first request's.
 * Outside any scope (a plain route, a job, `IdempotentTransaction.outside()`), calls use the
 * client's own DataLoader, as always. Per class, so every client of that Prisma runtime is
 * covered, those the library never saw included. Its cost: a read of the async context and two
 * map lookups per call (about 0.3 µs), against a query's hundreds.
 */
export function keepBatchesPerScope(loader: PrismaDataLoader): void {
  const prototype = Object.getPrototypeOf(loader) as PrismaDataLoader;
  if (keptClasses.has(prototype)) return;
  keptClasses.add(prototype);
  const request = prototype.request;
  prototype.request = function scopedRequest(this: PrismaDataLoader, params: unknown) {
    const scope = transactionScope.getStore();
    return request.call(scope ? loaderOf(this, scope) : this, params);
  };
}

function loaderOf(shared: PrismaDataLoader, scope: object): PrismaDataLoader {
  let loaders = loadersOfScope.get(scope);
  if (!loaders) loadersOfScope.set(scope, (loaders = new WeakMap()));
  let loader = loaders.get(shared);
  if (!loader) {
    // Prisma's own class with the client's own options: the same batching, for one scope.
    loader = new (shared.constructor as LoaderClass)(shared.options);
    loaders.set(shared, loader);
  }
  return loader;
}

/**
 * Keeps the batched queries of `client` (a Prisma client on the pool given to
 * IdempotencyModule) in the transaction of the request that made them. The library does it
 * at start-up for every Prisma client among the app's providers; call this for a client made
 * elsewhere (outside Nest's container, or later). Throws `PrismaBatchingUnknownError` for a
 * Prisma client whose batching the library does not know. Returns the client.
 */
export function keepPrismaBatchesPerRequest<T>(client: T): T {
  const batching = prismaBatchingOf(client);
  if (batching.kind === 'loader') {
    keepBatchesPerScope(batching.loader);
    return client;
  }
  if (batching.kind === 'unknown') throw new PrismaBatchingUnknownError(['the client given']);
  throw new TypeError('keepPrismaBatchesPerRequest() takes a Prisma client');
}
