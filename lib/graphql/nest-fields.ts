/**
 * How Nest's code-first schema reads an object type's fields from a resolver's value: by the
 * class property each `@Field()` decorates (`@Field({ name: 'label' }) get display()` is read
 * as `display`), with its `defaultValue` where that property is `undefined`. GraphQL's own
 * default resolver reads the field's schema name, with no default: a schema of its own
 * (schema first) is read so.
 */
export interface NestField {
  /** The class property Nest reads. */
  readonly property: string;
  /** Its `@Field({ defaultValue })`, answered where the property is `undefined`. */
  readonly fallback?: { readonly value: unknown };
  /**
   * It has field middleware (`@Field({ middleware })`): code of the app's around Nest's read
   * of the property, which may read the rest of its parent (see `fieldResolution`).
   */
  readonly middleware?: true;
}

/** A class, as Nest's metadata holds it. */
type AnyClass = abstract new (...args: never[]) => unknown;

/** The parts of Nest's `TypeMetadataStorage` read here (a public export of `@nestjs/graphql`). */
export interface TypeMetadata {
  getObjectTypesMetadata(): ClassMetadata[];
  getObjectTypeMetadataByTarget(target: AnyClass): ClassMetadata | undefined;
  getInterfaceMetadataByTarget(target: AnyClass): ClassMetadata | undefined;
}

export interface ClassMetadata {
  target: AnyClass;
  name: string;
  isAbstract?: boolean;
  interfaces?: AnyClass | AnyClass[] | (() => AnyClass | AnyClass[]);
  properties?: {
    name: string;
    schemaName: string;
    options?: { defaultValue?: unknown; middleware?: unknown[] };
    middleware?: unknown[];
  }[];
}

/** An object type as Nest built it: its class, and its fields by schema name. */
export interface NestType {
  readonly target: AnyClass;
  readonly fields: ReadonlyMap<string, NestField>;
}

/** Each object type, by its name, once Nest's metadata was read. */
export type NestFields = ReadonlyMap<string, NestType>;

let loading: Promise<NestFields | undefined> | undefined;
let loaded: NestFields | undefined;

/**
 * Reads Nest's metadata of the app's object types, once, on the first GraphQL answer (the
 * schema is built by then). Undefined without `@nestjs/graphql`.
 */
export function loadNestFields(): Promise<NestFields | undefined> {
  loading ??= import('@nestjs/graphql').then(
    (nest) => {
      const storage = (nest as unknown as { TypeMetadataStorage?: TypeMetadata })
        .TypeMetadataStorage;
      loaded = storage ? fieldsOfTypes(storage) : undefined;
      return loaded;
    },
    () => undefined,
  );
  return loading;
}

/** How Nest reads the field `name` of the object type `type`; undefined where it does not. */
export function nestField(type: string, name: string): NestField | undefined {
  return loaded?.get(type)?.fields.get(name);
}

/**
 * Whether `value` is an instance of the class Nest built the object type `type` from (or of
 * a subclass: class-transformer applies the parent's decorators to it): a replay's object
 * names that class again, for the layers outside the library
 * that look its metadata up by it (`ClassSerializerInterceptor`: its `@Expose()`,
 * `@Exclude()` and `@Transform()`).
 */
export function isOfNestType(type: string, value: object): boolean {
  const target = loaded?.get(type)?.target;
  return target !== undefined && value instanceof target;
}

/** The class Nest built the object type `type` from, if it did. */
export function nestTarget(type: string): object | undefined {
  return loaded?.get(type)?.target;
}

/**
 * An empty plain object that names the class Nest built `type` from as its `constructor` (not
 * enumerable), where class-transformer looks a value's class up; undefined if none. Not an
 * instance: none of the class's getters or methods runs on a replay's partial data (a getter
 * reading a field the operation did not select, or an ES `#private` field, would throw).
 */
export function plainOfNestType(type: string): object | undefined {
  const target = loaded?.get(type)?.target;
  return target ? plainNaming(target) : undefined;
}

/** An empty plain object naming `target` as its (non-enumerable) `constructor`: see above. */
export function plainNaming(target: object): object {
  const value = {};
  Object.defineProperty(value, 'constructor', {
    value: target,
    writable: true,
    configurable: true,
  });
  return value;
}

/** Each concrete object type's fields, with its interfaces' and its parent classes'. */
export function fieldsOfTypes(storage: TypeMetadata): NestFields {
  const types = new Map<string, NestType>();
  for (const metadata of storage.getObjectTypesMetadata()) {
    if (metadata.isAbstract) continue;
    const fields = new Map<string, NestField>();
    // As Nest builds the type: its parents' fields, then its interfaces', then its own.
    for (const owner of ownersOf(storage, metadata)) {
      for (const property of owner.properties ?? []) {
        const options = property.options ?? {};
        fields.set(property.schemaName, {
          property: property.name,
          ...('defaultValue' in options && options.defaultValue !== undefined
            ? { fallback: { value: options.defaultValue } }
            : {}),
          ...(hasMiddleware(property) ? { middleware: true as const } : {}),
        });
      }
    }
    types.set(metadata.name, { target: metadata.target, fields });
  }
  return types;
}

/** Whether Nest wraps the field in middleware of the app's (its metadata or its options'). */
function hasMiddleware(property: { middleware?: unknown[]; options?: { middleware?: unknown[] } }) {
  return (property.middleware?.length ?? 0) > 0 || (property.options?.middleware?.length ?? 0) > 0;
}

/**
 * The classes whose fields a type has, in the order Nest builds its fields (a later one's field
 * of a schema name wins): its parent class's (as Nest built the parent's type, recursively:
 * the parent's own parents and interfaces too), then its interfaces', each followed by theirs
 * (interfaces of interfaces), then its own. A field renamed on an interface a parent class
 * implements (`@ObjectType({ isAbstract: true, implements: () => [Authored] }) Entry`, `Note
 * extends Entry`) is read at its property, as Nest reads it (adversary 101). `seen` stops a
 * cycle of interfaces.
 */
function ownersOf(
  storage: TypeMetadata,
  metadata: ClassMetadata,
  seen: ReadonlySet<AnyClass> = new Set(),
): ClassMetadata[] {
  if (seen.has(metadata.target)) return [];
  const within = new Set(seen).add(metadata.target);
  const owners: ClassMetadata[] = [];
  // Its nearest parent class Nest knows (one it decorated), with all that parent's owners; a
  // class between them that Nest does not know adds nothing.
  let parent = Object.getPrototypeOf(metadata.target) as AnyClass | null;
  while (parent && parent !== Function.prototype) {
    const found =
      storage.getObjectTypeMetadataByTarget(parent) ?? storage.getInterfaceMetadataByTarget(parent);
    if (found) {
      owners.push(...ownersOf(storage, found, within));
      break;
    }
    parent = Object.getPrototypeOf(parent) as AnyClass | null;
  }
  // Its interfaces, then theirs, level by level (as Nest's `getRecursiveInterfaces`).
  let level = interfacesOf(storage, metadata);
  const visited = new Set<AnyClass>(within);
  while (level.length > 0) {
    const next: ClassMetadata[] = [];
    for (const face of level) {
      if (visited.has(face.target)) continue;
      visited.add(face.target);
      // An interface class that extends another interface class has that one's fields too.
      owners.push(...parentOwnersOf(storage, face, visited), face);
      next.push(...interfacesOf(storage, face));
    }
    level = next;
  }
  owners.push(metadata);
  return owners;
}

/** The owners of the nearest parent class Nest knows of an interface (see `ownersOf`). */
function parentOwnersOf(
  storage: TypeMetadata,
  metadata: ClassMetadata,
  seen: ReadonlySet<AnyClass>,
): ClassMetadata[] {
  let parent = Object.getPrototypeOf(metadata.target) as AnyClass | null;
  while (parent && parent !== Function.prototype) {
    const found = storage.getInterfaceMetadataByTarget(parent);
    if (found) return ownersOf(storage, found, seen);
    parent = Object.getPrototypeOf(parent) as AnyClass | null;
  }
  return [];
}

/** The interfaces a class declares (`implements`), as Nest's metadata holds them. */
function interfacesOf(storage: TypeMetadata, metadata: ClassMetadata): ClassMetadata[] {
  const declared = metadata.interfaces;
  const faces =
    typeof declared === 'function' && !isClass(declared)
      ? (declared as () => AnyClass | AnyClass[])()
      : (declared as AnyClass | AnyClass[] | undefined);
  return [faces ?? []]
    .flat()
    .map((face) => storage.getInterfaceMetadataByTarget(face))
    .filter((found): found is ClassMetadata => found !== undefined);
}

/** A class (an interface's), not a thunk returning classes. */
function isClass(value: object): boolean {
  return /^class[\s{]/.test(Function.prototype.toString.call(value as () => unknown));
}
