/**
 * The request as the adapter gives it: Express's `Request` or Fastify's `FastifyRequest`.
 * Typed loosely on purpose so that the library depends on neither adapter.
 */
export interface IdempotencyRequest {
  method: string;
  url: string;
  originalUrl?: string;
  headers: Record<string, string | string[] | undefined>;
  body?: unknown;
  rawBody?: Buffer;
}
