/**
 * Prisma's DataLoader, as the library meets it inside a Prisma client (`_requestHandler
 * .dataloader`, the same from Prisma 2 to 7): every query of the client goes through its
 * `request()`, which queues the ones it batches (`findUnique`, `findUniqueOrThrow`, an array
 * `$transaction`'s, an interactive transaction's) and sends them from one `process.nextTick`.
 */
export interface PrismaDataLoader {
  request(params: unknown): Promise<unknown>;
  readonly options: object;
}

/** What a value is, for the library's part in Prisma's batching. */
export type PrismaBatching =
  | { kind: 'not-prisma' }
  /** A Prisma client whose batching is not the DataLoader the library knows. */
  | { kind: 'unknown' }
  | { kind: 'loader'; loader: PrismaDataLoader };

type Shape = Record<string, unknown>;
const isObject = (value: unknown): value is Shape =>
  (typeof value === 'object' || typeof value === 'function') && value !== null;

/**
 * A Prisma client (one of its `$extends` results and transaction clients too, which share its
 * DataLoader): its `$` methods are public API, the DataLoader is not, so a client whose
 * DataLoader is not there (another major version) is told apart from a value that is no client.
 * Never throws: a provider's value may be a proxy that throws on an unknown property.
 */
export function prismaBatchingOf(value: unknown): PrismaBatching {
  try {
    if (!isObject(value)) return { kind: 'not-prisma' };
    const client = ['$connect', '$transaction', '$extends'].every(
      (method) => typeof value[method] === 'function',
    );
    if (!client) return { kind: 'not-prisma' };
    const handler = value._requestHandler;
    const loader = isObject(handler) ? handler.dataloader : undefined;
    if (!isObject(loader) || typeof loader.request !== 'function') return { kind: 'unknown' };
    if (!isObject(loader.options) || typeof loader.options.batchBy !== 'function') {
      return { kind: 'unknown' };
    }
    const own = Object.getPrototypeOf(loader) as Shape | null;
    if (!own || own === Object.prototype || typeof own.request !== 'function') {
      return { kind: 'unknown' };
    }
    return { kind: 'loader', loader: loader as unknown as PrismaDataLoader };
  } catch {
    return { kind: 'not-prisma' };
  }
}
