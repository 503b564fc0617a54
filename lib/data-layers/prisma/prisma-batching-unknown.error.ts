/**
 * A Prisma client of the app batches its queries in a way the library does not know (not
 * Prisma 7's DataLoader): it cannot keep each request's batched reads in its own transaction,
 * so it refuses to start rather than let one request's `findUnique` run in another's.
 */
export class PrismaBatchingUnknownError extends Error {
  constructor(readonly clients: readonly string[]) {
    super(
      `Prisma client ${clients.join(', ')}: its query batching (findUnique, findUniqueOrThrow, ` +
        '$transaction([...]) calls made in one tick, sent as one batch) is not the one the ' +
        'library knows (Prisma 7’s DataLoader), so the reads of two requests could run in one ' +
        'request’s transaction. Use a Prisma version the library supports (7), or report the ' +
        'version you use.',
    );
    this.name = 'PrismaBatchingUnknownError';
  }
}
