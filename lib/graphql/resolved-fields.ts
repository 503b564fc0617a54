import { type Logger } from '@nestjs/common';
import { nestField } from './nest-fields.js';
import { type GraphQLObjectType, type GraphQLOutputType, type GraphQLSchema } from 'graphql';
/** The `graphql` package's exports (as graphql-module.ts names them; not imported, which loads this file). */
type GraphqlModule = typeof import('graphql');

/** The fields the app resolves with a `@ResolveField()`, as `Type.field` (see `noteResolvedField`). */
const resolvedByApp = new Set<string>();

/**
 * Notes a field the app resolves with a method of its own (the start-up scan of resolvers):
 * in the schema every field has a resolver (Nest's and Apollo's wrappers read the parent's
 * property), so only Nest's metadata tells a `@ResolveField()`.
 */
export function noteResolvedField(field: string): void {
  resolvedByApp.add(field);
}

/**
 * Whether the app resolves the field of `type` with code of its own, which runs again on a
 * replay reading its parent: a `@ResolveField()` of the type or of an interface it
 * implements, or any other resolver the schema holds for it (a Nest field middleware,
 * `@Field({ middleware })`, which wraps Nest's read of the property; a Mercurius loader or
 * resolver; a schema transform's), told apart from the resolvers that only read the parent's
 * property (see `isAppResolver`). Such a field's parent keeps its unselected own data, and the
 * field its raw input (adversary 74: a loader reading `accountId`, a middleware masking by
 * `visibility`).
 */
export function isResolvedByApp(type: GraphQLObjectType, field: string): boolean {
  if (resolvedByApp.size > 0) {
    const owners = [type.name, ...type.getInterfaces().map((face) => face.name)];
    if (owners.some((owner) => resolvedByApp.has(`${owner}.${field}`))) return true;
  }
  if (nestField(type.name, field)?.middleware) return true;
  const resolve = type.getFields()[field]?.resolve;
  // Without Nest's reader known, every Nest field would look the app's: the schema is then
  // not read, and Nest's metadata alone tells (see `loadPlainReaders`).
  return resolve !== undefined && plainReaders.length > 0 && isAppResolver(resolve, plainReaders);
}

/**
 * The texts of the resolvers that only read a parent's property: Nest's code-first one (one
 * closure per field, so told by its code, read from the installed Nest: see
 * `loadPlainReaders`). GraphQL's default resolver is told by identity (`PLAIN_FUNCTIONS`).
 */
let plainReaders: readonly string[] = [];
/** GraphQL's own default resolver, when loaded (`loadPlainReaders`). */
const PLAIN_FUNCTIONS = new WeakSet<object>();
/** Each resolver's verdict, as its text is read once. */
const verdicts = new WeakMap<object, boolean>();

/**
 * Whether a schema field's `resolve` is the app's: neither GraphQL's default resolver nor one
 * whose code is a plain reader's (Nest's read of the property and its `defaultValue`).
 */
export function isAppResolver(
  resolve: (...args: never[]) => unknown,
  plain: readonly string[],
): boolean {
  if (PLAIN_FUNCTIONS.has(resolve)) return false;
  let verdict = verdicts.get(resolve);
  if (verdict === undefined) {
    const text = Function.prototype.toString.call(resolve);
    verdict = !plain.includes(text) && !isApolloInstrumentation(text);
    if (plain === plainReaders) verdicts.set(resolve, verdict);
  }
  return verdict;
}

/**
 * Apollo Server's wrapper of every field's resolver (its plugins' `willResolveField`), which
 * calls the field's own resolver, kept out of sight in its closure: told by its code, and
 * taken as plain. Behind it, what the app resolves is known from Nest's metadata only
 * (`@ResolveField()`, field middleware), not from the schema.
 */
export function isApolloInstrumentation(text: string): boolean {
  return (
    text.includes('symbolExecutionDispatcherWillResolveField') &&
    text.includes('symbolUserFieldResolver')
  );
}

/**
 * Reads, once, what a plain reader is: GraphQL's `defaultFieldResolver`, and the code of the
 * resolver Nest's code-first schema gives a `@Field()` without middleware (made by Nest's own
 * factory, so that it is the installed version's). Without Nest's factory (another layout of
 * `@nestjs/graphql`), `plainReaders` is left empty and the schema's resolvers are not read:
 * a `@ResolveField()` and field middleware are still known, from Nest's metadata.
 */
export async function loadPlainReaders(graphql: { defaultFieldResolver: object }): Promise<void> {
  PLAIN_FUNCTIONS.add(graphql.defaultFieldResolver);
  const factory = await import(
    // Not a public export of @nestjs/graphql: read by its path, and tolerated when absent.
    '@nestjs/graphql/dist/schema-builder/factories/object-type-definition.factory.js' as string
  ).catch(() => undefined);
  const create = (
    factory as
      | { ObjectTypeDefinitionFactory?: { prototype?: { createFieldResolver?: unknown } } }
      | undefined
  )?.ObjectTypeDefinitionFactory?.prototype?.createFieldResolver;
  if (typeof create !== 'function') return;
  try {
    const made = (create as (field: object, options: object) => unknown)(
      { name: 'field', options: {} },
      {},
    );
    if (typeof made === 'function') plainReaders = [Function.prototype.toString.call(made)];
  } catch {
    // Another version's factory: as without it.
  }
}

/** How many fields a warning names at most (a large schema would make it unreadable). */
const NAMED_AT_MOST = 10;

/**
 * The fields at any depth under a mutation's return type that the app resolves with a
 * resolver of their own (a `@ResolveField()` of the type or of an interface it implements), as
 * `Type.field`, in the schema's order; a field read from its parent's property has none.
 * Members of unions and interfaces count.
 */
export function resolvedFieldsUnder(
  graphql: GraphqlModule,
  schema: GraphQLSchema,
  type: GraphQLOutputType,
): string[] {
  const found: string[] = [];
  const seen = new Set<string>();
  const visit = (outputType: GraphQLOutputType): void => {
    const named = graphql.getNamedType(outputType);
    if (seen.has(named.name)) return;
    seen.add(named.name);
    if (graphql.isAbstractType(named)) {
      for (const member of schema.getPossibleTypes(named)) visit(member);
      return;
    }
    if (!graphql.isObjectType(named)) return;
    const owners = [named.name, ...named.getInterfaces().map((face) => face.name)];
    for (const field of Object.values(named.getFields())) {
      if (owners.some((owner) => resolvedByApp.has(`${owner}.${field.name}`))) {
        found.push(`${named.name}.${field.name}`);
      }
      visit(field.type);
    }
  };
  visit(type);
  return found;
}

/** What each logger has said, so that a mutation's fields are named once, not on every call. */
const said = new WeakMap<Logger, Set<string>>();

/**
 * Says once per mutation field, at its first answer, which fields under it have resolvers of
 * their own: GraphQL runs them after the mutation's transaction committed, outside it, on the
 * first call and again on every replay, so what they write is not the mutation's and what
 * they read is read anew. Not refused: a field resolver that reads a relation is the rule, and
 * most read what does not change.
 */
export function warnResolvedFields(
  logger: Logger,
  mutation: string,
  /** The fields (`resolvedFieldsUnder`), read only the first time. */
  fieldsOf: () => readonly string[],
): void {
  let seen = said.get(logger);
  if (!seen) said.set(logger, (seen = new Set()));
  if (seen.has(mutation)) return;
  seen.add(mutation);
  const fields = fieldsOf();
  if (fields.length > 0) logger.warn(resolvedFieldsMessage(mutation, fields));
}

/** The warning: which fields, what happens to them, what to do. */
export function resolvedFieldsMessage(mutation: string, fields: readonly string[]): string {
  const named = fields.slice(0, NAMED_AT_MOST).join(', ');
  const more = fields.length > NAMED_AT_MOST ? ` and ${fields.length - NAMED_AT_MOST} more` : '';
  return (
    `the idempotent mutation ${mutation} answers fields that have resolvers of their own ` +
    `(${named}${more}): GraphQL runs them after the mutation's transaction committed, outside ` +
    'it, at the first call and again at every replay. What they write is not the mutation’s ' +
    '(it commits on its own, once per call), and what they read is read anew. Write in the ' +
    'mutation’s resolver (its value is stored and replayed); keep field resolvers to reads'
  );
}
