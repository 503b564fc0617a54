/**
 * Whether class-transformer holds a `@Transform()` for a class (or one it extends): a
 * serializer outside `@Idempotent()` (Nest's `ClassSerializerInterceptor`) runs it on every
 * answer, and it may read the value's other members (`obj.visibility` masking `email`), which
 * a replay must then have, selected or not. Read from class-transformer's own metadata, the
 * one the app's decorators wrote to; nothing without class-transformer.
 */
interface TransformStorage {
  _transformMetadatas?: Map<unknown, Map<string, unknown[]>>;
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

/** Whether `target` or a class it extends has a `@Transform()` of class-transformer's. */
export function hasClassTransforms(target: object): boolean {
  const transforms = storage?._transformMetadatas;
  if (!(transforms instanceof Map)) return false;
  for (let type: unknown = target; typeof type === 'function';) {
    if ((transforms.get(type)?.size ?? 0) > 0) return true;
    type = Object.getPrototypeOf(type);
  }
  return false;
}
