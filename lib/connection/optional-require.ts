import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);

/**
 * A peer dependency the app may not have (TypeORM, on an app built on Prisma, Drizzle or
 * Kysely), loaded synchronously: a top-level `await import()` would make the package an ES
 * module graph with top-level await, which a CommonJS app cannot `require()`. Undefined when it
 * is not installed; any other failure to load it is thrown.
 */
export function optionalRequire<T>(name: string): T | undefined {
  try {
    return require(name) as T;
  } catch (error) {
    if ((error as { code?: unknown }).code === 'MODULE_NOT_FOUND') return undefined;
    throw error;
  }
}
