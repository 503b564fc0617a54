/** What a resolver method is, as Nest's GraphQL decorators mark it or as a call shows it. */
export type ResolverKind = 'query' | 'mutation' | 'subscription' | 'field';

/** `@nestjs/graphql`'s metadata keys: `@Query()`, `@Mutation()`, `@Subscription()` set the first. */
const RESOLVER_TYPE = 'graphql:resolver_type';
/** Set by `@ResolveField()`. */
const RESOLVE_PROPERTY = 'graphql:resolve_property';
/** A `@ResolveField()`'s field name, when given (else its method's name). */
const RESOLVER_NAME = 'graphql:resolver_name';

/**
 * Why `@Idempotent()` cannot work on a resolver of `kind`, or undefined when it can (a root
 * mutation field). Pure: the start-up check asks it of every decorated resolver method, and a
 * call that the check could not see is refused by the same rule.
 */
export function resolverProblem(where: string, kind: ResolverKind): string | undefined {
  switch (kind) {
    case 'mutation':
      return undefined;
    case 'query':
      return (
        `${where}: a GraphQL query is safe by GraphQL's definition and must not change state, ` +
        'as a GET; keys are for mutations: put @Idempotent() on a @Mutation() resolver'
      );
    case 'subscription':
      return (
        `${where}: a GraphQL subscription is a stream of events, not one answer a retry could ` +
        'get again; put @Idempotent() on the @Mutation() that changes state'
      );
    case 'field':
      return (
        `${where}: a @ResolveField() runs once per object of an answer, not once per operation; ` +
        'put @Idempotent() on the root @Mutation() resolver'
      );
  }
}

/** The kind of a call, from the operation GraphQL runs and whether the field is at its root. */
export function calledKind(operation: string, root: boolean): ResolverKind {
  if (!root) return 'field';
  if (operation === 'mutation' || operation === 'subscription') return operation;
  return 'query';
}

/** The kind of a resolver method from Nest's metadata (read by name: nothing is imported). */
export function declaredKind(handler: object): ResolverKind | undefined {
  if (Reflect.getMetadata(RESOLVE_PROPERTY, handler)) return 'field';
  const type = Reflect.getMetadata(RESOLVER_TYPE, handler) as unknown;
  switch (type) {
    case 'Query':
      return 'query';
    case 'Mutation':
      return 'mutation';
    case 'Subscription':
      return 'subscription';
    default:
      return undefined;
  }
}

/**
 * The field a `@ResolveField()` method resolves, as `Type.field` (its class's `@Resolver()`
 * type, by its GraphQL name), or undefined for any other method or a resolver of no type.
 */
export function resolvedField(type: object, name: string, handler: object): string | undefined {
  if (!Reflect.getMetadata(RESOLVE_PROPERTY, handler)) return undefined;
  const parent = Reflect.getMetadata(RESOLVER_TYPE, type) as unknown;
  if (typeof parent !== 'string') return undefined;
  const field = Reflect.getMetadata(RESOLVER_NAME, handler) as unknown;
  return `${parent}.${typeof field === 'string' ? field : name}`;
}
