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
 * wrote: each field under it read from its parent's property (no resolver of the app's, no
 * middleware: what they gave is not kept), a list an array (a one-shot iterable was spent by
 * GraphQL), a union's or interface's member noted (`memberAt`, by key under the field).
 * Undefined where it cannot be made so: the output is then not stored.
 */
export function completedOutput(
  graphql: GraphqlModule,
  selection: OutputSelection,
  type: GraphQLOutputType,
  value: unknown,
  memberAt: (key: string) => string | undefined,
): { value: unknown } | undefined {
  const { schema, fragments, variables } = selection;
  const unknowable = Symbol('unknowable');
  const walk = (at: GraphQLOutputType, held: unknown, nodes: readonly FieldNode[], key: string) => {
    if (held === null || held === undefined) return null;
    if (typeof (held as PromiseLike<unknown>).then === 'function') throw unknowable;
    if (graphql.isNonNullType(at)) return walk(at.ofType, held, nodes, key);
    if (graphql.isListType(at)) {
      if (!Array.isArray(held)) throw unknowable;
      return held.map((item, i): unknown => walk(at.ofType, item, nodes, joinKey(key, i)));
    }
    if (graphql.isLeafType(at)) return at.serialize(held);
    if (typeof held !== 'object') throw unknowable;
    const told = graphql.isObjectType(at) ? at.name : memberAt(key);
    const concrete = told === undefined ? undefined : schema.getType(told);
    if (!concrete || !graphql.isObjectType(concrete)) throw unknowable;
    const object = held as Record<string, unknown>;
    const out: Record<string, unknown> = {};
    const fields = concrete.getFields();
    const chosen = selectedFields(graphql, schema, concrete, { nodes, fragments, variables });
    for (const [name, fieldNodes] of chosen) {
      const definition = fields[name];
      if (!definition || fieldResolution(concrete, name) !== 'property') throw unknowable;
      const own = object[nestField(concrete.name, name)?.property ?? name];
      if (typeof own === 'function') throw unknowable;
      for (const node of fieldNodes) {
        const responseKey = node.alias?.value ?? name;
        if (responseKey in out) continue;
        const same = fieldNodes.filter((each) => (each.alias?.value ?? name) === responseKey);
        out[responseKey] = walk(definition.type, own, same, joinKey(key, responseKey));
      }
    }
    // GraphQL's own `__typename`, where selected.
    for (const node of typenameNodes(graphql, nodes))
      out[node.alias?.value ?? node.name.value] = told;
    return out;
  };
  try {
    return { value: walk(type, value, selection.nodes, '') };
  } catch {
    return undefined;
  }
}

/** The `__typename` fields right in `nodes`' selection sets (not in fragments: then unsure). */
function typenameNodes(graphql: GraphqlModule, nodes: readonly FieldNode[]): FieldNode[] {
  const found: FieldNode[] = [];
  for (const node of nodes) {
    for (const each of node.selectionSet?.selections ?? []) {
      if (each.kind === graphql.Kind.FIELD && each.name.value === '__typename') found.push(each);
      else if (each.kind !== graphql.Kind.FIELD) {
        // A fragment may select it for one member only: not made up.
        const inner = each.kind === graphql.Kind.INLINE_FRAGMENT ? each.selectionSet : undefined;
        if (
          !inner ||
          inner.selections.some(
            (s) => s.kind === graphql.Kind.FIELD && s.name.value === '__typename',
          )
        ) {
          throw new Error('typename in a fragment');
        }
      }
    }
  }
  return found;
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
