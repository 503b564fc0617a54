import { type GraphQLFieldResolver, type GraphQLSchema } from 'graphql';
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

/** Each object's later places that read a field otherwise, with their reads by property. */
const placed = new WeakMap<object, { place: Place; reads: Map<PropertyKey, () => unknown> }[]>();

/** Notes that at `place`, GraphQL's read of `object`'s `property` gives what `read` gives. */
export function notePlacedRead(
  object: object,
  place: Place,
  property: PropertyKey,
  read: () => unknown,
): void {
  let places = placed.get(object);
  if (!places) placed.set(object, (places = []));
  let at = places.find((each) => each.place === place);
  if (!at) places.push((at = { place, reads: new Map() }));
  at.reads.set(property, read);
}

/** The read noted for `object`'s `property` at the response path `path`, if any. */
export function placedRead(
  object: object,
  path: readonly (string | number)[],
  property: PropertyKey,
): (() => unknown) | undefined {
  const places = placed.get(object);
  if (!places) return undefined;
  for (const { place, reads } of places) {
    if (reads.has(property) && isPlace(place, path)) return reads.get(property);
  }
  return undefined;
}

/** The schemas whose fields read from a property answer each place's own read. */
const answering = new WeakSet<object>();

/**
 * Puts a wrapper on each field of the schema read from its parent's property (GraphQL's
 * default resolver, Nest's read of a `@Field()`), once per schema: where its parent is an
 * object a later place of the answer read otherwise (see above), it answers that place's
 * read; otherwise it reads as before. Put on before the library's other wrappers (those read
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
      if (fieldResolution(type, field.name) !== 'property') continue;
      const own = field.resolve ?? graphql.defaultFieldResolver;
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
          const read = placedRead(source, pathOf(info).slice(0, -1), property);
          if (read) return read();
        }
        return own.call(this, source, args, context, info);
      };
      // Still a read of the property to the library's walk (see `fieldResolution`).
      noteResolverKind(resolve, 'property');
      field.resolve = resolve;
    }
  }
}
