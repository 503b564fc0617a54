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

/** Whether `target` or a class it extends has metadata of class-transformer's (see above). */
export function hasClassMetadata(target: object): boolean {
  if (!storage) return false;
  const kinds = [
    storage._transformMetadatas,
    storage._exposeMetadatas,
    storage._excludeMetadatas,
    storage._typeMetadatas,
  ].filter((kind): kind is Map<unknown, Map<string, unknown>> => kind instanceof Map);
  for (let type: unknown = target; typeof type === 'function';) {
    // A class-level @Exclude() or @Expose() is kept under the class with no property name.
    if (kinds.some((kind) => kind.has(type))) return true;
    type = Object.getPrototypeOf(type);
  }
  return false;
}
