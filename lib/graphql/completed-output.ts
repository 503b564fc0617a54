import { type FieldNode, type GraphQLOutputType } from 'graphql';
import { type GraphqlModule } from './graphql-module.js';
import { nestField } from './nest-fields.js';
import { joinKey, type OutputSelection } from './output-names.js';
import { fieldResolution } from './resolved-fields.js';
import { selectedFields } from './selection.js';

/**
 * A middleware field's output as GraphQL completed it (by response key, each scalar
 * serialized), made again from what its middleware gave: for an answer whose `data` lost it
 * though GraphQL completed it (adversary 82: another root field's error nulled the whole
 * `data`), where the answer hook cannot read it. Only where it is sure to be what GraphQL
 * wrote: each field under it read from its parent's property (no resolver of the app's: what
 * it gave is not kept), or behind middleware of its own, from the result its wrapper gave
 * GraphQL at the first call (`resultAt`, by key under the field: adversary 89), a union's or interface's member noted (`memberAt`,
 * by key under the field). Read as GraphQL reads it (adversary 83): the fields its selection
 * names through named fragments and inline ones alike (`__typename` too), a Promise awaited
 * (again: it gives what it gave GraphQL), a list from any iterable that gives a new iterator
 * each time (a `Set`, a `Map`; a one-shot iterator, a generator, was spent by GraphQL).
 * Undefined where it cannot be made so (then the output is noted as lost: see `outputsIn`); a
 * Promise of it where a Promise is under the output. A field read with its `@Field({
 * defaultValue })` where its property is `undefined`, as Nest's reader does (adversary 84).
 *
 * A field or list item whose read or completion failed inside it (a Promise that rejects, a
 * getter that throws, a scalar that cannot be serialized) was an error of GraphQL's there,
 * and null at the nearest nullable place at or above it (adversary 84: the whole output was
 * stored null for one nullable field's error): made so, the error's key noted (`errorsAt`, by
 * key under the field) for the answer hook to find among the answer's errors. One that
 * reaches the field itself: not made (the field's own null, with that error, is stored).
 */
export function completedOutput(
  graphql: GraphqlModule,
  selection: OutputSelection,
  type: GraphQLOutputType,
  value: unknown,
  memberAt: (key: string) => string | undefined,
  resultAt: (key: string) => { value: unknown } | undefined = () => undefined,
): Made | Promise<Made> {
  const { schema, fragments, variables } = selection;
  const unknowable = Symbol('unknowable');
  // A non-null place's failure, carried up to the nearest nullable one.
  const carried = Symbol('carried');
  const errorsAt: string[] = [];
  /** The value at a field's or an item's place, `at` its type, null where it failed. */
  const place = (at: GraphQLOutputType, key: string, complete: () => unknown): unknown => {
    const failed = (error: unknown) => {
      if (error === unknowable) throw error;
      if (error !== carried && !errorsAt.includes(key)) errorsAt.push(key);
      if (graphql.isNonNullType(at)) throw carried;
      return null;
    };
    // GraphQL's error where a non-null place has no value.
    const present = (value: unknown) => {
      if (value === null && graphql.isNonNullType(at)) throw new Error('null');
      return value;
    };
    try {
      const value = complete();
      return isThenable(value)
        ? handled(Promise.resolve(value).then(present).then(undefined, failed))
        : present(value);
    } catch (error) {
      return failed(error);
    }
  };
  const walk = (
    at: GraphQLOutputType,
    held: unknown,
    nodes: readonly FieldNode[],
    key: string,
  ): unknown => {
    if (held === null || held === undefined) return null;
    if (isThenable(held))
      return handled(Promise.resolve(held).then((got) => walk(at, got, nodes, key)));
    if (graphql.isNonNullType(at)) return walk(at.ofType, held, nodes, key);
    if (graphql.isListType(at)) {
      const items = listItems(held);
      if (!items) throw unknowable;
      return settled(
        items.map((item, i): unknown => {
          const itemKey = joinKey(key, i);
          return place(at.ofType, itemKey, () => walk(at.ofType, item, nodes, itemKey));
        }),
      );
    }
    if (graphql.isLeafType(at)) return at.serialize(held);
    if (typeof held !== 'object') throw unknowable;
    const told = graphql.isObjectType(at) ? at.name : memberAt(key);
    const concrete = told === undefined ? undefined : schema.getType(told);
    if (!concrete || !graphql.isObjectType(concrete)) throw unknowable;
    const object = held as Record<string, unknown>;
    const keys: string[] = [];
    const values: unknown[] = [];
    const fields = concrete.getFields();
    const chosen = selectedFields(graphql, schema, concrete, { nodes, fragments, variables }, true);
    for (const [name, fieldNodes] of chosen) {
      for (const node of fieldNodes) {
        const responseKey = node.alias?.value ?? name;
        if (keys.includes(responseKey)) continue;
        keys.push(responseKey);
        // GraphQL's own `__typename`: the member told.
        if (name === '__typename') {
          values.push(told);
          continue;
        }
        const definition = fields[name];
        if (!definition) throw unknowable;
        const reading = nestField(concrete.name, name);
        const same = fieldNodes.filter((each) => (each.alias?.value ?? name) === responseKey);
        const fieldKey = joinKey(key, responseKey);
        const resolution = fieldResolution(concrete, name);
        // Behind middleware of its own: completed from what its middleware gave GraphQL, as
        // the library's wrapper saw it at the first call (`resultAt`), never its input.
        const given = resolution === 'middleware' ? resultAt(fieldKey) : undefined;
        if (given) {
          values.push(
            place(definition.type, fieldKey, () =>
              walk(definition.type, given.value, same, fieldKey),
            ),
          );
          continue;
        }
        if (resolution !== 'property') throw unknowable;
        values.push(
          place(definition.type, fieldKey, () => {
            const own = object[reading?.property ?? name];
            if (typeof own === 'function') throw unknowable;
            // Nest's reader: the field's default where the property is undefined.
            const read = own === undefined && reading?.fallback ? reading.fallback.value : own;
            return walk(definition.type, read, same, fieldKey);
          }),
        );
      }
    }
    const made = (all: readonly unknown[]) => {
      const out: Record<string, unknown> = {};
      keys.forEach((responseKey, i) => (out[responseKey] = all[i]));
      return out;
    };
    const all = settled(values);
    return isThenable(all) ? handled(Promise.resolve(all).then(made)) : made(all as unknown[]);
  };
  let walked: unknown;
  try {
    walked = walk(type, value, selection.nodes, '');
  } catch {
    return undefined;
  }
  const made = (done: unknown): Made =>
    errorsAt.length > 0 ? { value: done, errorsAt } : { value: done };
  if (!isThenable(walked)) return made(walked);
  // What a Promise under it gave; one whose failure reached the field itself: not made.
  return Promise.resolve(walked).then(made, () => undefined);
}

/**
 * A made output, or undefined where it cannot be made (see `completedOutput`); `errorsAt`:
 * the keys under the field where GraphQL answered an error (a null at or above each).
 */
export type Made = { value: unknown; errorsAt?: readonly string[] } | undefined;

function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    (typeof value === 'object' || typeof value === 'function') &&
    value !== null &&
    typeof (value as PromiseLike<unknown>).then === 'function'
  );
}

/** The values, or a Promise of them where one is a Promise. */
function settled(values: unknown[]): unknown[] | Promise<unknown[]> {
  return values.some(isThenable) ? handled(Promise.all(values)) : values;
}

/**
 * `promise`, its failure marked as seen: a walk given up on later (`unknowable`) leaves it
 * unread, which must not be an unhandled rejection; whoever reads it still gets the failure.
 */
function handled<T>(promise: Promise<T>): Promise<T> {
  promise.catch(() => undefined);
  return promise;
}

/**
 * A list value's items as GraphQL read them: an array's; any other iterable object's where
 * it gives a new iterator each time (a `Set`, a `Map`, a class's own), read once more here.
 * Undefined for a one-shot iterator (a generator, an iterator helper's `map`: its
 * `[Symbol.iterator]()` is itself, spent by GraphQL) and for what is not iterable.
 */
export function listItems(value: unknown): readonly unknown[] | undefined {
  if (Array.isArray(value)) return value;
  if (typeof value !== 'object' || value === null) return undefined;
  const iterate = (value as { [Symbol.iterator]?: unknown })[Symbol.iterator];
  if (typeof iterate !== 'function') return undefined;
  const iterator = (iterate as () => Iterator<unknown>).call(value);
  if ((iterator as unknown) === value) return undefined;
  const items: unknown[] = [];
  for (let step = iterator.next(); !step.done; step = iterator.next()) items.push(step.value);
  return items;
}

/**
 * A middleware's result for a field of `type` as GraphQL reads it: a list given as a one-shot
 * iterable (a generator, an iterator helper's `map`) read into an array once, before GraphQL
 * completes it, so that the key met again in the same operation, which answers that same
 * result (`sharedAt`), reads its items too, not a spent iterable (adversary 82); GraphQL reads
 * the array as it would have read the iterable (what the iterable throws is thrown here,
 * GraphQL's error at the field alike). Anything else as it is.
 */
export function readList(graphql: GraphqlModule, type: GraphQLOutputType, value: unknown): unknown {
  const at = graphql.isNonNullType(type) ? type.ofType : type;
  if (!graphql.isListType(at) || Array.isArray(value)) return value;
  if (typeof value !== 'object' || value === null) return value;
  const iterate = (value as { [Symbol.iterator]?: unknown })[Symbol.iterator];
  return typeof iterate === 'function' ? Array.from(value as Iterable<unknown>) : value;
}
