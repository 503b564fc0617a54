/**
 * Whether class-transformer holds metadata for a class (or one it extends): its `@Transform()`,
 * `@Expose()`, `@Exclude()` or `@Type()`. A serializer outside `@Idempotent()` (Nest's
 * `ClassSerializerInterceptor`) applies them on every answer, and a transform may read any of
 * the value (`obj.visibility` masking `email`, `obj.owner.hidden`, a `@Type()`d member's
 * siblings), which a replay must then have, selected or not. Read from class-transformer's own
 * metadata, the one the app's decorators wrote to; nothing without class-transformer.
 */
interface TransformStorage {
  _typeMetadatas?: Map<unknown, Map<string, unknown>>;
  _transformMetadatas?: Map<unknown, Map<string, unknown[]>>;
  _exposeMetadatas?: Map<unknown, Map<string, unknown>>;
  _excludeMetadatas?: Map<unknown, Map<string, unknown>>;
}

let storage: TransformStorage | undefined;
let loading: Promise<void> | undefined;

/** Reads where class-transformer keeps its metadata, once (with the `graphql` package). */
export function loadClassTransforms(): Promise<void> {
  loading ??= import('class-transformer/cjs/storage.js' as string).then(
    (loaded: { defaultMetadataStorage?: TransformStorage }) => {
      storage = loaded.defaultMetadataStorage;
    },
    () => undefined,
  );
  return loading;
}

/** A class, as class-transformer keys its metadata by. */
type ClassOf = abstract new (...args: never[]) => unknown;

/** The maps of class-transformer's metadata, by class (empty without class-transformer). */
function kinds(): Map<unknown, Map<string, unknown>>[] {
  if (!storage) return [];
  return [
    storage._transformMetadatas,
    storage._exposeMetadatas,
    storage._excludeMetadatas,
    storage._typeMetadatas,
  ].filter((kind): kind is Map<unknown, Map<string, unknown>> => kind instanceof Map);
}

/** What class-transformer keeps of a `@Type()`: the subtypes of its discriminator, if any. */
interface TypeMetadata {
  options?: { discriminator?: { subTypes?: { value?: unknown }[] } };
}

let subTypesFrom: { size: number; classes: Set<unknown> } | undefined;

/**
 * The classes a `@Type(() => Pet, { discriminator })` names as its subtypes: a serializer
 * finds the subtype of a value by its class (`subTypes.find(t => value.constructor === t.value)`),
 * so a replay names it too, though it has no metadata of its own (adversary 50a: a subtype
 * with no decorator failed every replay). Read again when `@Type()`s were added since.
 */
function discriminatorSubTypes(): Set<unknown> {
  const types = storage?._typeMetadatas;
  if (!(types instanceof Map)) return new Set();
  if (subTypesFrom?.size === types.size) return subTypesFrom.classes;
  const classes = new Set<unknown>();
  for (const byProperty of types.values()) {
    for (const metadata of byProperty.values()) {
      for (const subType of (metadata as TypeMetadata).options?.discriminator?.subTypes ?? []) {
        if (typeof subType.value === 'function') classes.add(subType.value);
      }
    }
  }
  subTypesFrom = { size: types.size, classes };
  return classes;
}

/**
 * The nearest class of `target`'s chain (itself, then the classes it extends) that has
 * metadata of its own, or is a discriminator's subtype: a class-level `@Exclude()` or
 * `@Expose()` is kept under the class with no property name.
 */
function decoratedIn(target: unknown): ClassOf | undefined {
  const maps = kinds();
  const subTypes = discriminatorSubTypes();
  for (let type: unknown = target; typeof type === 'function';) {
    if (subTypes.has(type) || maps.some((kind) => kind.has(type))) return type as ClassOf;
    type = Object.getPrototypeOf(type);
  }
  return undefined;
}

/** Whether `target` or a class it extends has metadata of class-transformer's (see above). */
export function hasClassMetadata(target: object): boolean {
  return decoratedIn(target) !== undefined;
}

/**
 * The class a serializer reads `value` as, if class-transformer knows it: the nearest class of
 * its own chain with metadata (an entity class returned for a GraphQL type built from another
 * class, the common split of entity and model), which a replay must name again.
 */
export function transformedClassOf(value: object): ClassOf | undefined {
  return decoratedIn((value as { constructor?: unknown }).constructor);
}

/**
 * The class class-transformer knows by `name`, when exactly one has it (what a replay names);
 * undefined when none or several do.
 */
export function transformedClassNamed(name: string): ClassOf | undefined {
  const found = new Set<ClassOf>();
  for (const type of discriminatorSubTypes()) {
    if (typeof type === 'function' && type.name === name) found.add(type as ClassOf);
  }
  for (const kind of kinds()) {
    for (const type of kind.keys()) {
      if (typeof type === 'function' && type.name === name) found.add(type as ClassOf);
    }
  }
  return found.size === 1 ? [...found][0] : undefined;
}
