import { type GraphQLFieldResolver, type GraphQLSchema } from 'graphql';
import { wrapsField } from './field-wrappers.js';
import { type GraphqlModule } from './graphql-module.js';
import { nestField } from './nest-fields.js';
import { isPlace, type Place } from './read-places.js';
import { fieldResolution } from './resolved-fields.js';
import { noteResolverKind } from './resolver-kind.js';
import { pathOf } from './stored-at-answer.js';

/**
 * Each place's own read of a field of one object answered at several places (read-places.ts,
 * adversary 110): the object is one, as it is to the app without the library, but GraphQL
 * reads its getter field at each place, and each place answers what the library read there
 * (a signed URL's own signature), at the first call (the object's one Proxy: wire-value.ts
 * `over`) as on a replay (the one node adopted at each place: wire-value.ts `fromWire`).
 * Noted only where a later place read another value than the object answers; every other
 * read is the object's own.
 */

/**
 * Each object's places that read a field otherwise, with their reads by property: `reads` for
 * every response key there (a later place's read), `byKey` for one key only (an alias's own
 * read of a getter, after the place's first key's: alias-reads.ts, adversary 112).
 */
const placed = new WeakMap<
  object,
  {
    place: Place;
    reads: Map<PropertyKey, () => unknown>;
    byKey: Map<PropertyKey, Map<string, () => unknown>>;
  }[]
>();

/**
 * Notes that at `place`, GraphQL's read of `object`'s `property` gives what `read` gives: for
 * the response key `responseKey` only, where given (an alias's own read), else for every key.
 */
export function notePlacedRead(
  object: object,
  place: Place,
  property: PropertyKey,
  read: () => unknown,
  responseKey?: string,
): void {
  let places = placed.get(object);
  if (!places) placed.set(object, (places = []));
  let at = places.find((each) => each.place === place);
  if (!at) places.push((at = { place, reads: new Map(), byKey: new Map() }));
  if (responseKey === undefined) {
    at.reads.set(property, read);
    return;
  }
  let keys = at.byKey.get(property);
  if (!keys) at.byKey.set(property, (keys = new Map()));
  keys.set(responseKey, read);
}

/** Whether a read of `object`'s `property` is noted at `place` (that very place) already. */
export function hasPlacedRead(object: object, place: Place, property: PropertyKey): boolean {
  return Boolean(
    placed
      .get(object)
      ?.find((each) => each.place === place)
      ?.reads.has(property),
  );
}

/**
 * `source` as the field's own resolver reads it at a place that read `property` otherwise:
 * that place's read there, every other member the object's own. The field's resolver still
 * runs (Nest's applies its `@Field({ defaultValue })` to an `undefined` read, adversary 111),
 * on the one object it would have been given (getters run on it).
 */
function readingAt(source: object, property: PropertyKey, read: () => unknown): object {
  return new Proxy(source, {
    get: (target, key) => (key === property ? read() : Reflect.get(target, key)),
  });
}

/**
 * The read noted for `object`'s `property` at the response path `path` (its parent's), if
 * any: the response key's own (`responseKey`, an alias's), else the place's.
 */
export function placedRead(
  object: object,
  path: readonly (string | number)[],
  property: PropertyKey,
  responseKey?: string | number,
): (() => unknown) | undefined {
  const places = placed.get(object)?.filter(({ place }) => isPlace(place, path));
  if (!places) return undefined;
  if (typeof responseKey === 'string') {
    for (const { byKey } of places) {
      const own = byKey.get(property)?.get(responseKey);
      if (own) return own;
    }
  }
  for (const { reads } of places) {
    const read = reads.get(property);
    if (read) return read;
  }
  return undefined;
}

/** The schemas whose fields read from a property answer each place's own read. */
const answering = new WeakSet<object>();

/**
 * Puts a wrapper on each field of the schema read from its parent's property by a resolver of
 * its own (Nest's read of a `@Field()`), once per schema: where its parent is an object a later
 * place of the answer read otherwise (see above), the field's resolver reads that place's read
 * (its `defaultValue` applied as ever); otherwise it reads as before. A field with no resolver
 * (schema-first) is left alone: the executor's field resolver, maybe the app's, reads it
 * (field-wrappers.ts), and each place answers the object's first read. Put on before the library's other wrappers (those read
 * through it). The cost for any other object is one WeakMap look-up.
 */
export function answerPlacedReadsOf(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
): void {
  if (!schema || answering.has(schema)) return;
  answering.add(schema);
  const roots = [schema.getQueryType(), schema.getMutationType(), schema.getSubscriptionType()];
  for (const type of Object.values(schema.getTypeMap())) {
    if (!graphql.isObjectType(type) || type.name.startsWith('__') || roots.includes(type)) {
      continue;
    }
    for (const field of Object.values(type.getFields())) {
      // Never a field the executor's field resolver reads (see field-wrappers.ts).
      if (fieldResolution(type, field.name) !== 'property' || !wrapsField(field)) continue;
      const own = field.resolve!;
      // Where Nest reads it: its class property (a field renamed with `@Field({ name })`).
      let property: string | undefined;
      const resolve: GraphQLFieldResolver<unknown, unknown> = function (
        this: unknown,
        source,
        args,
        context,
        info,
      ) {
        if (typeof source === 'object' && source !== null && placed.has(source)) {
          property ??= nestField(type.name, field.name)?.property ?? field.name;
          const path = pathOf(info);
          // By the response key too: an alias's own read of a getter (alias-reads.ts).
          const read = placedRead(source, path.slice(0, -1), property, path[path.length - 1]);
          if (read) return own.call(this, readingAt(source, property, read), args, context, info);
        }
        return own.call(this, source, args, context, info);
      };
      // Still a read of the property to the library's walk (see `fieldResolution`).
      noteResolverKind(resolve, 'property');
      field.resolve = resolve;
    }
  }
}
