/** One method of a class, as the start-up scans read it. */
export interface ClassMethod {
  type: new () => object;
  name: string;
  handler: object;
}

/**
 * Every prototype method of `classes`, in the shape the start-up check and the OpenAPI
 * documenter both walk; `names` lists a prototype's method names (Nest's `MetadataScanner`).
 */
export function* classMethods(
  classes: Iterable<unknown>,
  names: (prototype: object) => string[],
): Generator<ClassMethod> {
  for (const type of classes) {
    if (typeof type !== 'function' || !type.prototype) continue;
    const prototype = type.prototype as Record<string, unknown>;
    for (const name of names(prototype)) {
      const handler = prototype[name];
      if (typeof handler === 'function') {
        yield { type: type as new () => object, name, handler };
      }
    }
  }
}
