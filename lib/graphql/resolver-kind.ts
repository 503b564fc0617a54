/**
 * What a schema field's `resolve` is, told by its code: how the library stores and replays
 * the field (see `fieldResolution` in resolved-fields.ts).
 *
 * - `property`: it only reads its parent's property (GraphQL's default resolver, Nest's
 *   code-first read of a `@Field()`): the field's value is read, stored and replayed as data.
 * - `middleware`: Nest's read of the property behind field middleware (`@Field({ middleware
 *   })`, or the global `buildSchemaOptions.fieldMiddleware`): its output is stored as the
 *   operation's answer gave it, and replayed so (middleware-outputs.ts).
 * - `app`: code of the app's that computes the field (a Mercurius loader or resolver, a schema
 *   transform's): it reads its parent and does not read the property.
 *
 * Undefined where the real resolver is out of sight (Apollo Server's plugins' wrapper): Nest's
 * metadata tells there.
 */
export type ResolverKind = 'property' | 'middleware' | 'app';

/** The texts of Nest's resolvers, by kind, as the installed Nest writes them. */
export interface NestReaders {
  /** Its read of a property (one closure per field, so told by its code). */
  readonly plain: readonly string[];
  /** Its wrapper of a resolver in field middleware (`decorateFieldResolverWithMiddleware`). */
  readonly middleware: readonly string[];
}

/** The installed Nest's readers (`loadNestReaders`); empty until then, or without them. */
let nestReaders: NestReaders = { plain: [], middleware: [] };
/** GraphQL's own default resolver, when loaded (`loadNestReaders`): told by identity. */
const PLAIN_FUNCTIONS = new WeakSet<object>();
/** Each resolver's kind, as its text is read once. */
const kinds = new WeakMap<object, ResolverKind | undefined>();

/**
 * Notes the kind of a resolver the library put in the schema in place of another (the wrapper
 * of a middleware field: middleware-outputs.ts), which its text cannot tell.
 */
export function noteResolverKind(resolve: (...args: never[]) => unknown, kind: ResolverKind): void {
  kinds.set(resolve, kind);
}

/** The kind of a resolver of the app's schema, against the installed Nest's readers. */
export function schemaResolverKind(
  resolve: (...args: never[]) => unknown,
): ResolverKind | undefined {
  // Without Nest's read known, every Nest field would look the app's: not read then, and
  // Nest's metadata alone tells.
  if (kinds.has(resolve)) return kinds.get(resolve);
  if (nestReaders.plain.length === 0) return undefined;
  const kind = resolverKind(resolve, nestReaders);
  kinds.set(resolve, kind);
  return kind;
}

/**
 * The kind of a schema field's `resolve` (see `ResolverKind`), given the texts of Nest's
 * readers: GraphQL's default resolver and Nest's read of a property are `property`, Nest's
 * middleware wrapper `middleware`, Apollo Server's wrapper unknown, any other the app's.
 */
export function resolverKind(
  resolve: (...args: never[]) => unknown,
  readers: NestReaders,
): ResolverKind | undefined {
  if (PLAIN_FUNCTIONS.has(resolve)) return 'property';
  const text = Function.prototype.toString.call(resolve);
  if (readers.plain.includes(text)) return 'property';
  if (readers.middleware.includes(text)) return 'middleware';
  return isApolloInstrumentation(text) ? undefined : 'app';
}

/**
 * Apollo Server's wrapper of every field's resolver (its plugins' `willResolveField`), which
 * calls the field's own resolver, kept out of sight in its closure: told by its code. Behind
 * it, what the app resolves is known from Nest's metadata only (`@ResolveField()`, field
 * middleware), not from the schema.
 */
export function isApolloInstrumentation(text: string): boolean {
  return (
    text.includes('symbolExecutionDispatcherWillResolveField') &&
    text.includes('symbolUserFieldResolver')
  );
}

/** Each schema field's resolver as it was before Apollo Server wrapped it (`noteOwnResolvers`). */
const ownResolvers = new WeakMap<object, (...args: never[]) => unknown>();

/**
 * Notes each field's resolver of `schema` as it is now, before Apollo Server wraps every one
 * of them for its plugins' `willResolveField` (at its first operation, once per schema): the
 * wrapper keeps the field's own resolver in its closure, out of sight, so a field behind the
 * global `buildSchemaOptions.fieldMiddleware` (which Nest's metadata does not tell) would be
 * read as a property, and its middleware run again on a replay (adversary 81). Called when
 * Apollo Server starts (the library's plugin's `serverWillStart`).
 */
export function noteOwnResolvers(
  schema: { getTypeMap(): Record<string, unknown> } | undefined,
): void {
  for (const type of Object.values(schema?.getTypeMap() ?? {})) {
    const fields = (type as { getFields?: () => Record<string, { resolve?: unknown }> }).getFields;
    if (typeof fields !== 'function') continue;
    for (const field of Object.values(fields.call(type))) {
      const resolve = field.resolve;
      if (typeof resolve !== 'function' || ownResolvers.has(field)) continue;
      if (isApolloInstrumentation(Function.prototype.toString.call(resolve))) continue;
      ownResolvers.set(field, resolve as (...args: never[]) => unknown);
    }
  }
}

/**
 * The kind of a schema field's resolver (see `schemaResolverKind`); where it is Apollo
 * Server's wrapper, the kind of the resolver the field had before it (`noteOwnResolvers`).
 */
export function fieldResolverKind(field: {
  resolve?: (...args: never[]) => unknown;
}): ResolverKind | undefined {
  const resolve = field.resolve;
  const kind = resolve && schemaResolverKind(resolve);
  if (kind !== undefined) return kind;
  const own = ownResolvers.get(field);
  return own && own !== resolve ? schemaResolverKind(own) : undefined;
}

/**
 * Reads, once, what Nest's readers are: GraphQL's `defaultFieldResolver`, and the code of the
 * resolvers Nest's code-first schema gives a `@Field()`, without middleware and with (made by
 * Nest's own factory, so that they are the installed version's). Without Nest's factory
 * (another layout of `@nestjs/graphql`), the schema's resolvers are not read: a
 * `@ResolveField()` and a `@Field()`'s own middleware are still known, from Nest's metadata.
 */
export async function loadNestReaders(graphql: { defaultFieldResolver: object }): Promise<void> {
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
  const textOf = (field: object): string[] => {
    try {
      const made = (create as (field: object, options: object) => unknown)(field, {});
      return typeof made === 'function' ? [Function.prototype.toString.call(made)] : [];
    } catch {
      // Another version's factory: as without it.
      return [];
    }
  };
  const plain = textOf({ name: 'field', options: {} });
  // A middleware that is never run: only the wrapper's code is read.
  const middleware = textOf({ name: 'field', options: {}, middleware: [() => undefined] });
  // The wrapper's code must not be the plain read's (it would take every field for one).
  nestReaders = {
    plain,
    middleware: middleware.filter((text) => !plain.includes(text)),
  };
}
