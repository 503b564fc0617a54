import { loadClassTransforms } from './class-transforms.js';
import { loadNestFields } from './nest-fields.js';
import { loadNestReaders } from './resolver-kind.js';

/** The `graphql` package's exports, loaded on the first GraphQL request. */
export type GraphqlModule = typeof import('graphql');

let loading: Promise<GraphqlModule> | undefined;

/**
 * `graphql` is an optional peer: the library loads without it, and imports it only once a
 * resolver runs, when the app has it (Nest's GraphQL drivers need it).
 */
export function loadGraphql(): Promise<GraphqlModule> {
  // With Nest's metadata of the app's object types (how its fields are read: nest-fields.ts)
  // and class-transformer's (class-transforms.ts).
  // And how Nest's resolvers read a parent's property (resolver-kind.ts).
  return (loading ??= Promise.all([
    import('graphql').then(async (graphql) => {
      await loadNestReaders(graphql);
      return graphql;
    }),
    loadNestFields(),
    loadClassTransforms(),
  ]).then(([graphql]) => graphql));
}
