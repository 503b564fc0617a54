import { type Logger } from '@nestjs/common';
import { nestField } from './nest-fields.js';
import { fieldResolverKind, type ResolverKind } from './resolver-kind.js';
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
 * How a field of `type` is answered, as storing and replaying it must treat it (see
 * `ResolverKind`):
 *
 * - `app`: the app's code computes it, at the first call and again on a replay, from its
 *   parent: a `@ResolveField()` of the type or of an interface it implements, or another
 *   resolver the schema holds for it (a Mercurius loader or resolver, a schema transform's).
 *   Its parent keeps its unselected own data, the field its raw input; a retry that selects
 *   it is never refused.
 * - `middleware`: Nest's read of the property behind field middleware (a `@Field({
 *   middleware })`, told by Nest's metadata; the global `fieldMiddleware`, told by the schema).
 *   Its input is never read nor stored: its output is, as the operation's answer gave it, and
 *   a replay answers that, never running the middleware (middleware-outputs.ts).
 * - `property`: read from its parent's property, as data.
 */
export function fieldResolution(type: GraphQLObjectType, field: string): ResolverKind {
  const byApp = isResolveField(type, field);
  const definition = type.getFields()[field];
  return resolutionFrom({
    byApp,
    // Behind Apollo Server's wrapper: the resolver the field had before it.
    kind: byApp ? undefined : definition && fieldResolverKind(definition),
    nest: nestField(type.name, field),
    globalMiddleware,
  });
}

/**
 * Whether the app resolves the field with a `@ResolveField()` of the type or of an interface it
 * implements (`noteResolvedField`), rather than another resolver the schema holds for it.
 */
export function isResolveField(type: GraphQLObjectType, field: string): boolean {
  if (resolvedByApp.size === 0) return false;
  const owners = [type.name, ...type.getInterfaces().map((face) => face.name)];
  return owners.some((owner) => resolvedByApp.has(`${owner}.${field}`));
}

/** Each type's `hasAppField`, with the count of noted fields it was told by. */
const appTyped = new WeakMap<GraphQLObjectType, { noted: number; has: boolean }>();

/**
 * Whether a field of `type`, selected or not, is the app's (`fieldResolution`): its objects
 * keep their own data for a retry that selects it (parent-keeping.ts). Told once per type
 * (again only when more fields were noted since), so a type without one costs a lookup.
 */
export function hasAppField(type: GraphQLObjectType): boolean {
  const told = appTyped.get(type);
  if (told && told.noted === resolvedByApp.size) return told.has;
  const has = Object.keys(type.getFields()).some((name) => fieldResolution(type, name) === 'app');
  appTyped.set(type, { noted: resolvedByApp.size, has });
  return has;
}

/** What tells how a field is answered (see `fieldResolution`). */
export interface ResolutionTold {
  /** A `@ResolveField()` of the type or of an interface it implements. */
  byApp: boolean;
  /** The kind of the schema's resolver (resolver-kind.ts), where its code tells it. */
  kind?: ResolverKind;
  /** How Nest reads the field (code first), where Nest built it. */
  nest?: { middleware?: unknown };
  /** Whether Nest's `buildSchemaOptions.fieldMiddleware` is set (`noteGlobalFieldMiddleware`). */
  globalMiddleware: boolean;
}

/** How a field is answered, from what is told of it (see `fieldResolution`). */
export function resolutionFrom(told: ResolutionTold): ResolverKind {
  if (told.byApp) return 'app';
  // Nest puts the global middleware in every code-first `@Field()`'s read, under whatever a
  // schema transform wraps it in (a directive's `@upper`, whose wrapper the code tells as
  // the app's): told by Nest's own record of it, never by the resolver's code (adversary 86).
  if (told.globalMiddleware && told.nest) return 'middleware';
  if (told.kind === 'app' || told.kind === 'middleware') return told.kind;
  // Out of the schema's sight (Nest's reader unknown, Apollo's wrapper put on before the
  // library saw the schema), or read as a property there: Nest's metadata tells of a
  // `@Field()`'s own middleware.
  return told.nest?.middleware ? 'middleware' : 'property';
}

/** Whether Nest's global field middleware is set (`buildSchemaOptions.fieldMiddleware`). */
let globalMiddleware = false;

/**
 * Notes, at start-up, whether the app's `GraphQLModule` sets the global field middleware
 * (`buildSchemaOptions.fieldMiddleware`, non-empty): Nest then runs it in every code-first
 * `@Field()`'s read, which the library tells as a middleware field.
 */
export function noteGlobalFieldMiddleware(set: boolean): void {
  globalMiddleware = set;
}

/** Whether the app's code computes the field (`app`: see `fieldResolution`). */
export function isResolvedByApp(type: GraphQLObjectType, field: string): boolean {
  return fieldResolution(type, field) === 'app';
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
