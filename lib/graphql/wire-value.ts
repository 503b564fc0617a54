import {
  type FieldNode,
  type GraphQLAbstractType,
  type GraphQLInputType,
  type GraphQLLeafType,
  type GraphQLObjectType,
  type GraphQLOutputType,
  type GraphQLSchema,
} from 'graphql';
import { ANSWER_FORMAT, type FieldError, fieldError } from './field-answer.js';
import { type ResolverCall } from './graphql-field.js';
import { type GraphqlModule } from './graphql-module.js';
import {
  classMembers,
  describeValue,
  keepAll,
  keepData,
  keepsExactly,
  restoreData,
} from './kept-data.js';
import {
  besideFieldsMember,
  fieldPlaces,
  renamedFieldNames,
  writesBesideFields,
} from './field-places.js';
import { type ReplayLoss } from './replay-loss.js';
import { fieldResolution, hasAppField, isResolveField } from './resolved-fields.js';
import { readsWrappedGetter } from './wrapped-getters.js';
import { parentKeeping } from './parent-keeping.js';
import {
  isOfNestType,
  nestField,
  nestTarget,
  plainNaming,
  plainOfNestType,
} from './nest-fields.js';
import { hasClassMetadata, transformedClassNamed, transformedClassOf } from './class-transforms.js';
import { type ClassTree, classGetters, classTreeOf, namedByTree } from './class-tree.js';
import { answerAsMember, answerMembersOf } from './replayed-member.js';
import { type FieldAt, fieldAt, itemAt, memberInfo, rootAt } from './member-info.js';
import { noteToldMember, noteViewOf } from './told-members.js';
import { collectedNodes, type Selection, selectedFields } from './selection.js';
import { notStoredField } from './not-stored-field.js';
import { thrownError } from './thrown-error.js';
import { defineOwn, defineOwnSymbol } from './own-member.js';
import { firstRoots, graphReachedBy, parentRef, parentRefSource } from './parent-graph.js';
import { leftOutSource } from './left-out-parent.js';
import { nodeClasses, type SharedRead } from './node-classes.js';
import { ontoNode } from './parent-identity.js';
import { mayAnswerOtherwise, seenThrough } from './first-answer-view.js';
import { type Graph } from './typed-graph.js';
import { sameData } from './same-data.js';
import { recordOnce } from './same-record.js';
import { keptMember } from './hidden-members.js';
import { completedItems } from './completed-items.js';
import { adoptsList, keepsListItself, keptListItems } from './list-members.js';
import { listShape, shapedList } from './list-shapes.js';
import { recordInNode } from './record-in-node.js';
import { keptItem } from './kept-items.js';
import { rereadableList } from './rereadable-lists.js';
import { objectNodes } from './object-nodes.js';
import { rebuiltOrder, reorderOwnKeys, storedKeyOrder } from './key-order.js';
import { absentOnReplay, notedAbsentFields } from './absent-fields.js';
import { hasNoPrototype, unnamedPlain } from './bare-objects.js';
import { fieldPlace, laterHeld, laterRead, type Place, placeOfPath } from './read-places.js';
import { hasPlacedRead, notePlacedRead } from './placed-reads.js';
import { type AliasRead, aliasesApart, readsPerAlias, responseKeys } from './alias-reads.js';
import { wrapsField } from './field-wrappers.js';
import { readOrder } from './read-order.js';
import { pathOf } from './stored-at-answer.js';

/**
 * Values as GraphQL writes them (its "wire" form: what a scalar's `serialize()` makes of
 * them), walked along their schema type. Used both ways:
 *
 * - a resolver's value is stored in its wire form as far as the operation selects it (the
 *   field's selection set, not its whole type: see `selection.ts`), in which every scalar is already what the
 *   answer carries (a `Date` as the `DateTime` scalar's string, an enum as its name); a replay
 *   turns it back with each scalar's `parseValue()`, so that GraphQL, serializing it again,
 *   writes the same bytes as for the first answer (a scalar whose `serialize()` refuses a
 *   string, as Nest's `DateTime` does, would otherwise answer null); what the resolvers under
 *   it read that the wire form would change (an object's data that is no field, an `ID` that
 *   was a number) is kept beside it with its types (`KEPT`);
 * - a field's arguments are fingerprinted in their wire form, so that a `Date` or a `BigInt`
 *   argument counts by its value, and a value with no wire form (an `Upload`, a stream, a
 *   Promise) is refused rather than fingerprinted as `{}`.
 */

/** An argument value that has no JSON form, so cannot be fingerprinted. */
export class NotJsonArgumentError extends Error {
  constructor(
    readonly path: string,
    readonly what: string,
  ) {
    super(
      `the argument ${path} is ${what}, not JSON: no fingerprint can tell one such value from ` +
        'another. An idempotent mutation takes JSON arguments only: send a file as its digest ' +
        'or as an id of a file uploaded beforehand, not as an upload',
    );
    this.name = 'NotJsonArgumentError';
  }
}

/**
 * An argument value of JSON's kind (a date, a string, a number) that its scalar refuses to
 * write: a value the client mistyped (`"2026-02-30 soon"` for a `DateTime`), not an upload.
 */
export class ArgumentValueInvalidError extends Error {
  constructor(
    readonly path: string,
    readonly scalar: string,
    readonly why: string,
  ) {
    super(`the argument ${path} is not a valid value of its type ${scalar} (${why})`);
    this.name = 'ArgumentValueInvalidError';
  }
}

/**
 * The member of a stored object that holds, as typed JSON (see `kept-data.ts`), the object's
 * own data that is not a field and the fields whose wire form does not give them back. No
 * field can be so named: names that begin with `__` are GraphQL's own.
 */
export const KEPT = '__kept';

/**
 * The member of a stored object that holds the errors of its selected fields whose reading
 * failed (a Promise that rejected, a getter that threw), by field: a replay throws each again
 * when GraphQL reads that field, so it answers the same null and error at the same path.
 */
export const FAILED = '__failed';

/**
 * The member of a stored object that says it was an instance of the class Nest built its type
 * from (see `isOfNestType`): a replay makes it one again. A name says another class
 * class-transformer knows; `null` says it had no prototype at all (bare-objects.ts).
 */
export const INSTANCE = '__instance';

/**
 * The selected fields an object gave through its class (a getter, not data of its own), or as
 * its own data that is not enumerable: a replay has them as data, not enumerable, as they were. A serializer outside
 * `@Idempotent()` copies own enumerable data only (class-transformer skips a getter it is not
 * told to expose): enumerable, a getter reading a masked field (`label` from `email`) would
 * be copied on a replay that the first answer left out (adversary 49a).
 */
export const FROM_CLASS = '__fromClass';

/**
 * The member of a stored object that holds, as typed JSON, what the getters of its class gave
 * that are no field of its type (`get isPrivate()`, `@Expose({ name: 'displayName' }) get
 * fullName()`), for a class class-transformer serializes: a replay is plain data, with no
 * getter, and an outer serializer reads them again (a `@Transform()` masking by
 * `obj.isPrivate`, an exposed getter renamed): not enumerable, as a getter is not (adversary
 * 50a: a masked email shown; a non-null field answered null).
 */
export const GOTTEN = '__gotten';

/**
 * The member of a stored object that names, by field, the class of a scalar field's value that
 * was an object of a class class-transformer knows (a JSON scalar given a `Prefs` with an
 * `@Exclude()`d token): a serializer outside `@Idempotent()` transforms it as it transforms the
 * object holding it, so a replay names that class again (adversary 50a: the token shown).
 */
export const LEAF_CLASS = '__leafClass';

/**
 * The selected fields an object gave through a getter (of its class, or its own): a replay
 * gives them through getters too, on a prototype of its own, so that a copy keeping the
 * prototype (`Object.assign(Object.create(proto), value)`: Apollo's own clone, lodash's
 * `cloneDeep`) reads them as a copy of the first answer does (adversary 66).
 */
export const ACCESSORS = '__accessors';

/**
 * The selected fields whose value was a Promise (a TypeORM lazy relation): a replay gives a
 * Promise of the stored value there too, as the first answer does, for a `@ResolveField()`
 * that reads its parent's `.then()` (adversary 66).
 */
export const PROMISED = '__promised';

/**
 * The member of a stored object that holds, as typed JSON, its own data the app's resolvers
 * under it may read that the answer does not hold (parent-keeping.ts): its unselected fields'
 * where a field of its type is the app's (a retry may select it), or where it is a selected
 * field's value under such an object; its selected fields' raw inputs behind middleware; a
 * property a `defaultValue` filled in, as `undefined`. Unlike `KEPT`, left out of a stored
 * answer over `maxResponseBytes` (parent-data-within.ts): a replay's parent is then the answer's.
 */
export const PARENT = '__parent';

/** The classes in its kept data (`KEPT`), by path: see `LEAF_CLASS`. */
export const KEPT_CLASSES = '__keptClasses';

/**
 * The classes in its own data for the app's resolvers (`PARENT`), by path: left out with it
 * (an entity a `@ResolveField()` reads from its parent, named again on a replay).
 */
export const PARENT_CLASSES = '__parentClasses';

/**
 * The order of its own keys as the resolver returned it, where a replay would rebuild them in
 * another (see key-order.ts): read by a resolver that reads its parent in order (adversary 101:
 * `JSON.stringify(parent)` hashed into a version tag). Stored only where the app's resolvers
 * (or a serializer) read its data; a record without it keeps the rebuilt order.
 */
export const KEYS = '__keys';

/**
 * The selected fields the object did not have, answered null (absent-fields.ts): a replay
 * leaves them off its object, as the first call's had no such key. Stored only where its
 * `KEYS` would be.
 */
export const ABSENT = '__absent';

/**
 * The member of a stored object that holds, by field and then by response key, the reads of a
 * getter's leaf field under its aliases after the first (alias-reads.ts: a signed URL under
 * `a: url b: url` is signed for each), where one answered otherwise than the first key: its
 * wire form (`v`) or its failure (`e`, as `FAILED` holds one). A replay answers each alias its
 * own at its place (placed-reads.ts); the field's stored value is the first key's.
 */
export const ALIASED = '__aliased';

/** The members of a stored object that hold what a replay may do without: see `PARENT`. */
export const PARENT_MEMBERS: readonly string[] = [PARENT, PARENT_CLASSES];

/** The classes in what its getters gave (`GOTTEN`), by path: see `LEAF_CLASS`. */
export const GOTTEN_CLASSES = '__gottenClasses';

/** The members of a stored object that are the library's, not the value's. */
const LIBRARY_MEMBERS: ReadonlySet<string> = new Set([
  KEPT,
  PARENT,
  FAILED,
  INSTANCE,
  FROM_CLASS,
  GOTTEN,
  GOTTEN_CLASSES,
  KEPT_CLASSES,
  PARENT_CLASSES,
  LEAF_CLASS,
  ACCESSORS,
  PROMISED,
  KEYS,
  ABSENT,
  ALIASED,
]);

/** The loss of a class a replay cannot tell from another of its name, `where` it is. */
function twinLoss(where: string, twin: string): string {
  return (
    `${where} holds a ${twin}, not the only class of that name class-transformer knows: ` +
    'a replay cannot tell which, and answers an error there'
  );
}

/**
 * `value`'s class tree (see class-tree.ts), a loss noted for each class name a replay cannot
 * tell apart (`where` says whose: its field, its data, a getter of it).
 */
function classTreeNoting(
  value: unknown,
  where: string,
  type: string,
  losses: ReplayLoss[],
): ClassTree | undefined {
  const twins = new Set<string>();
  const tree = classTreeOf(value, twins);
  for (const twin of twins) {
    losses.push({ type, what: twinLoss(where, twin) });
  }
  return tree;
}

/**
 * A resolver's value stored (`wire`), and the value its first answer is given (`value`): the
 * resolver's own, but for a list that was a one-shot iterator (a generator, a `Map`'s
 * `values()`), which storing reads once, so the answer gets the list that was read (see
 * `materialized`).
 */
export interface StoredValue {
  wire: unknown;
  value: unknown;
  /**
   * The objects of `wire` that hold own data for the app's resolvers (`PARENT`): the only
   * places it may be left out (parent-data-within.ts), never a member of that name the app's
   * data holds (a JSON scalar's document: adversary 93).
   */
  parents?: readonly object[];
  /**
   * The own data of all its parents (`PARENT`), and each object's `KEPT`, as one typed graph:
   * each names its node (parent-graph.ts). Stored once, beside the answer; none where no
   * object keeps any.
   */
  parentGraph?: Graph;
  /** The objects of `wire` whose `KEPT` names a node of `parentGraph` (never left out). */
  keptHolders?: readonly object[];
}

/** What one walk of a value shares. */
interface Walk {
  graphql: GraphqlModule;
  schema: GraphQLSchema | undefined;
  selection: Selection;
  call: ResolverCall | undefined;
  losses: ReplayLoss[];
  /** Each iterable read, by itself: read once even where the value reaches it twice. */
  lists: WeakMap<object, unknown[]>;
  /**
   * Each iterable that threw as it was read, its error: thrown again where the walk reaches it
   * after the read-ahead (its items are gone), so its field fails as graphql-js fails it.
   */
  failedLists: WeakMap<object, { error: unknown }>;
  /**
   * Each object the first answer sees through a Proxy (`over`), its Proxy: what a read through
   * one of them gives of another is that one's Proxy (first-answer-view.ts).
   */
  views: WeakMap<object, object>;
  /**
   * What each object's Proxy (`views`) answers of the fields the library read, by the object:
   * the first place's reads, and a later place's of a field no earlier place read (one Proxy
   * per object, whatever its places: adversary 110).
   */
  givens: WeakMap<object, Map<PropertyKey, unknown>>;
  /**
   * The fields each selection selects of each type, collected once for all the items of a
   * list (as GraphQL collects a list's sub-fields once).
   */
  collected: WeakMap<readonly FieldNode[], Map<GraphQLObjectType, Map<string, FieldNode[]>>>;
  /** The field nodes each selection collects for each type, in order (`readOrder`), once. */
  ordered: WeakMap<readonly FieldNode[], Map<GraphQLObjectType, FieldNode[]>>;
  /** The wire objects that hold `PARENT`, as written. */
  parents: object[];
  /**
   * The objects that hold `KEPT`, as written: never left out (a serializer reads it as the
   * answer), its node kept in the shared graph whatever parents are left out.
   */
  keptHolders: object[];
  /** Each object's `KEPT` data, written into the shared graph with the parents' (below). */
  keptData: Walk['parentData'];
  /** Each parent's own data, written into one graph once the walk is done (`writeParents`). */
  parentData: {
    wire: Record<string, unknown>;
    data: Record<string, unknown>;
    /** The object whose data it is (the graph may reach it again: see `writeParents`). */
    source: object;
    type: string;
    /** Its properties the answer holds (its selected fields stored): see record-in-node.ts. */
    answered?: ReadonlySet<string>;
  }[];
  /**
   * Each selected list under an object kept for the app's resolvers, with the record its
   * parent's data is in: the record holds the array itself where the graph holds it or an
   * item of it elsewhere (`writeParents`, list-members.ts `keepsListItself`).
   */
  selectedLists: { record: Record<string, unknown>; property: string; list: unknown[] }[];
  /**
   * Each object answered whose record of its data is empty (the answer holds all it has), with
   * its properties the answer holds: an item of a list kept itself is written as its empty
   * record, never its whole row (`writeParents`: adversary 116).
   */
  bareParents: { source: object; answered: ReadonlySet<string> }[];
  /**
   * Each object's records of its data written so far (`PARENT`'s, `KEPT`'s), by object: a
   * place whose record holds the same is given that record, one node for all its places
   * (same-record.ts).
   */
  parentRecords: WeakMap<object, Record<string, unknown>[]>;
  keptRecords: WeakMap<object, Record<string, unknown>[]>;
}

/**
 * The resolver's value in its wire form, to be stored (see above), as far as the operation
 * selects it (`selection`, see `selection.ts`): a type's fields that are not selected are
 * neither read nor stored, as GraphQL reads only the selection (they may link back to the
 * value, load a lazy relation, or be large). A selected field's value that is a Promise (a
 * TypeORM lazy relation) is awaited, as GraphQL awaits it for the answer: walked as an object,
 * it would be stored as `{}`. A field selected under several aliases is stored once, by its
 * name (what a replay's default resolver reads), with all their sub-selections; a getter's
 * leaf field is read once per alias too, as GraphQL reads it, each later alias's own read
 * stored beside it (`ALIASED`).
 *
 * An object keeps, beside its fields, what the resolvers under it read of it that the wire
 * form would change (a `@ResolveField()` reads its parent): its own data that is not a field
 * (a `Date`, a Prisma model's `BigInt` column), each field whose scalar's `parseValue()` does
 * not give its value back (an `ID` that was a number comes back a string), and, when one of
 * its selected fields is the app's `@ResolveField()` (or a loader, or behind field middleware:
 * see `fieldResolution`), its unselected fields' own data (never a getter, a Promise or a
 * method), as the resolver returned them (`KEPT`). What a replay cannot
 * give back as it was (a method of the value's class, a function or a stream in its data) is
 * stored as it can be, and put in `losses` for the app's log.
 */
export async function outputWire(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
  type: GraphQLOutputType,
  promised: unknown,
  selection: Selection,
  call?: ResolverCall,
  losses: ReplayLoss[] = [],
): Promise<StoredValue> {
  answerMembersOf(schema);
  const walk: Walk = {
    graphql,
    schema,
    selection,
    call,
    losses,
    lists: new WeakMap(),
    failedLists: new WeakMap(),
    views: new WeakMap(),
    givens: new WeakMap(),
    collected: new WeakMap(),
    ordered: new WeakMap(),
    parents: [],
    parentData: [],
    keptHolders: [],
    keptData: [],
    parentRecords: new WeakMap(),
    keptRecords: new WeakMap(),
    selectedLists: [],
    bareParents: [],
  };
  // Its place in the operation's answer, for a field one object answers otherwise at each
  // of its places (read-places.ts); none known without the call.
  const place = call && placeOfPath(pathOf(call.info));
  const stored = await walkValue(
    walk,
    type,
    promised,
    selection.nodes,
    false,
    place,
    undefined,
    call && rootAt(call.info),
  );
  const parentGraph = writeParents(
    walk.parentData,
    losses,
    walk.keptData,
    walk.selectedLists,
    walk.bareParents,
  );
  return {
    ...stored,
    parents: walk.parents,
    keptHolders: walk.keptData.map(({ wire }) => wire),
    ...(parentGraph ? { parentGraph } : {}),
  };
}

/**
 * Writes the own data of every parent of the answer (`PARENT`) into ONE typed graph, each
 * parent's `PARENT` naming its node: an object several parents reach (`line.order`, the one
 * order, from every line) is written once, as it was one object (adversary 105: a graph per
 * parent wrote the order, with all its lines, again for each line: quadratic). So is a record
 * several places of one object hold (`recordOnce`: adversary 109), each place naming its node.
 * What does not come back as it was is put in `losses`, parent by parent.
 */
function writeParents(
  noted: Walk['parentData'],
  losses: ReplayLoss[],
  kept: Walk['keptData'] = [],
  lists: Walk['selectedLists'] = [],
  bare: Walk['bareParents'] = [],
): Graph | undefined {
  const parents = [...noted, ...kept];
  if (parents.length === 0) return undefined;
  // Each record once, however many places name it (one object at several places: see
  // `recordOnce`), by its first place.
  const recordIndex = new Map<object, number>();
  const firsts: (typeof parents)[number][] = [];
  for (const parent of parents) {
    if (recordIndex.has(parent.data)) continue;
    recordIndex.set(parent.data, firsts.length);
    firsts.push(parent);
  }
  const recordOf = (parent: (typeof parents)[number]) => recordIndex.get(parent.data)!;
  // Never throws: a member with no typed JSON form is left out alone, and named (adversary
  // 99: a key `prototype` in it once left all of it out, and failed `writeKept`'s mutation).
  let typed = keepAll(firsts.map((parent) => parent.data));
  // A selected list the graph holds elsewhere (a hidden snapshot's `lines`), or an item of
  // which it holds (the page's own `primary`): the record holds the array itself, one node
  // with the other place's, which a replay makes the list it answers (adversary 114).
  const listsKept: unknown[][] = [];
  for (const { record, property, list } of lists) {
    if (!keepsListItself(list, (item) => typed.nodes.has(item))) continue;
    defineOwn(record, property, list);
    listsKept.push(list);
  }
  if (listsKept.length > 0) typed = keepAll(firsts.map((parent) => parent.data));
  // A record whose own object's node holds the same data (its lines reached back through
  // `order.raw.lines`): that node is the record, its data written once (record-in-node.ts:
  // adversary 114, each line's hidden cache was stored twice, and the size trim weighed it so).
  const inNode = new Set<object>();
  const notInNode = new Set<object>();
  for (const parent of noted) {
    const one =
      typed.nodes.has(parent.source) &&
      recordInNode(parent.data, parent.source, parent.answered ?? new Set());
    (one ? inNode : notInNode).add(parent.data);
  }
  for (const data of notInNode) inNode.delete(data);
  // An object with records that differ by place (their selections do) is written as none.
  const recordsOf = new Map<object, Set<object>>();
  for (const parent of noted) {
    const records = recordsOf.get(parent.source) ?? new Set<object>();
    recordsOf.set(parent.source, records.add(parent.data));
  }
  for (const records of recordsOf.values()) {
    if (records.size > 1) for (const data of records) inNode.delete(data);
  }
  // Each such object written as its record, wherever the graph reaches it: never its whole
  // row, whose selected fields the answer holds (adversary 108: forty lines' rows).
  const writtenAs = new Map<object, object>();
  for (const parent of noted)
    if (inNode.has(parent.data)) writtenAs.set(parent.source, parent.data);
  // An item of a list kept itself, at any depth, whose record is empty (the answer holds all
  // it has): written as that empty record, its node made the answer's item on a replay
  // (`keptList`). Written whole, a page's rows were stored twice, and the size trim then left
  // out the page's `primary` (adversary 116). Never an object that has a record elsewhere.
  const items = keptListItems(listsKept);
  // Each of its places must answer all it has (their selections may differ).
  const wholeElsewhere = new Set<object>();
  for (const { source, answered } of bare) {
    if (!recordInNode({}, source, answered)) wholeElsewhere.add(source);
  }
  for (const { source } of bare) {
    if (!items.has(source) || recordsOf.has(source) || wholeElsewhere.has(source)) continue;
    if (typed.nodes.has(source)) writtenAs.set(source, {});
  }
  if (writtenAs.size > 0) {
    typed = keepAll(
      firsts.map((parent) =>
        inNode.has(parent.data) ? (parent.source as Record<string, unknown>) : parent.data,
      ),
      writtenAs,
    );
  }
  // Its own object, where the graph holds it too (each `line.order` back to its lines): a
  // replay makes the parent that very node (adversary 107: `indexOf(line)` answered -1), an
  // entity's whose data is all under `KEPT` too (adversary 108); or, one object at several
  // places that nothing reaches back to, its first record's node at each (object-nodes.ts:
  // adversary 111, one product three objects on a replay).
  const objects = objectNodes(
    parents.map((parent) => ({
      source: parent.source,
      at: parent.wire,
      root: typed.roots[recordOf(parent)],
    })),
    (source) => typed.nodes.get(source),
  );
  parents.forEach((parent, index) => {
    const { wire, type } = parent;
    const ref = parentRef(typed.roots[recordOf(parent)], objects[index]);
    if (index >= noted.length) wire[KEPT] = ref;
    else wire[PARENT] = ref;
    const unfaithful = typed.unfaithful[recordOf(parent)];
    if (unfaithful.length > 0) {
      const what = unfaithful.map((member) => `${member.name} (${member.what})`);
      losses.push({ type, what: `its data ${what.join(', ')} does not come back as it was` });
    }
  });
  // Objects of classes a serializer knows in it, named again on a replay, each node once
  // (node-classes.ts: a path tree per parent walked what they share again from each).
  const { classes, twins } = nodeClasses(typed.nodes);
  if (twins.size > 0) {
    const reachedFirst = firstRoots(typed.kept, typed.roots);
    const parentOf = new Map(typed.roots.map((root, index) => [root, index]));
    const said = new Set<string>();
    for (const [node, twin] of twins) {
      const type = firsts[parentOf.get(reachedFirst[node]) ?? 0].type ?? firsts[0].type;
      if (said.has(`${type}\0${twin}`)) continue;
      said.add(`${type}\0${twin}`);
      losses.push({ type, what: twinLoss('its data', twin) });
    }
  }
  if (Object.keys(classes).length === 0) return typed.kept;
  // What `KEPT` reaches a serializer reads as the answer: a class a replay cannot tell there
  // answers an error, as ever, never a plain object its transforms would not mask (`k`).
  const keptRoots = kept.map((parent) => typed.roots[recordOf(parent)]);
  if (keptRoots.length > 0) {
    const reached = graphReachedBy(typed.kept, keptRoots).moved;
    for (const [node, entry] of Object.entries(classes)) {
      if (reached.has(Number(node))) entry.k = 1;
    }
  }
  return Object.assign(typed.kept, { c: classes });
}

/**
 * Writes `kept` (what the resolvers under an object read of it that its wire form would change)
 * into its wire form as typed JSON, with the classes a serializer knows in it; what does not
 * come back as it was is put in `losses`.
 */
function writeKept(
  walk: Walk,
  wire: Record<string, unknown>,
  kept: Record<string, unknown>,
  type: string,
  source: object,
): void {
  delete wire[KEPT];
  delete wire[KEPT_CLASSES];
  if (Object.keys(kept).length === 0) return;
  // Written into the answer's shared graph with the parents' data (`writeParents`): under a
  // class class-transformer serializes, all of an object's data is here, and an order every
  // line points back at was written again per line (adversary 107: quadratic). Its place is
  // kept meanwhile, so the wire's members keep their order.
  wire[KEPT] = parentRef(-1);
  // One object at several places keeps its data once (same-record.ts: adversary 109).
  walk.keptData.push({ wire, data: recordOnce(walk.keptRecords, source, kept), source, type });
}

/**
 * Notes `parent` (its own data for the app's resolvers the answer does not hold: see
 * `PARENT`) for its wire form, written with all the others' once the walk is done (see
 * `writeParents`: `PARENT` is in its place meanwhile, so the wire's members keep their order).
 */
function writeParent(
  walk: Walk,
  wire: Record<string, unknown>,
  parent: Record<string, unknown>,
  source: object,
  type: string,
  answered: ReadonlySet<string>,
): void {
  delete wire[PARENT];
  delete wire[PARENT_CLASSES];
  if (Reflect.ownKeys(parent).length === 0) {
    walk.bareParents.push({ source, answered });
    return;
  }
  wire[PARENT] = parentRef(-1);
  // One object at several places keeps its data once (same-record.ts: adversary 109).
  const data = recordOnce(walk.parentRecords, source, parent);
  walk.parentData.push({ wire, data, source, type, answered });
}

async function walkValue(
  walk: Walk,
  type: GraphQLOutputType,
  promised: unknown,
  nodes: readonly FieldNode[],
  /**
   * Under an object whose class class-transformer serializes (see `hasClassMetadata`,
   * `'class'`): all of its own data is kept, as a serializer outside reads it all again on a
   * replay.
   */
  whole: Whole = false,
  /** Its place in the answer (read-places.ts), where the call tells it. */
  place?: Place,
  /**
   * Its fields' reads, made ahead in graphql-js's order (`readAhead`); made here, once its value
   * is known, where none were (the walk's root, a value a Promise gave).
   */
  ahead?: ReadAhead,
  /** Its field's place, as graphql-js tells a `resolveType()` of it (member-info.ts). */
  at?: FieldAt,
): Promise<StoredValue> {
  const { graphql, schema, losses } = walk;
  const value = isThenable(promised) ? await promised : promised;
  if (value === null || value === undefined) return { wire: null, value: promised };
  // Read synchronously, before anything is awaited, as graphql-js completes a value
  // depth-first until a Promise: the walk below awaits, and its lists' items walk side by
  // side, so reads made as it goes would come in another order (adversary 114).
  ahead ??= readAhead(walk, type, value, nodes, at);
  // Under a member told by a Promise (an async `resolveType()`): read when it settled, as
  // graphql-js completes it then, whatever the walk was doing.
  if (ahead && 'settled' in ahead) ahead = await ahead.settled;
  if (graphql.isNonNullType(type)) {
    const inner = await walkValue(walk, type.ofType, value, nodes, whole, place, ahead, at);
    return { wire: inner.wire, value: inner.value === value ? promised : inner.value };
  }
  if (graphql.isListType(type)) {
    const list = materialized(walk, value);
    // Every index, a hole as `undefined`, as GraphQL completes it (completed-items.ts).
    const items = await Promise.all(
      completedItems(list, (item, index) =>
        walkValue(
          walk,
          type.ofType,
          item,
          nodes,
          whole,
          place && [...place, index],
          ahead && 'items' in ahead ? ahead.items[index] : undefined,
          itemAt(at, index),
        ),
      ),
    );
    // A Set or a typed array, read again alike, is given as it is (rereadable-lists.ts).
    const same =
      (list === value || rereadableList(value)) && items.every((item, i) => item.value === list[i]);
    // Else its items' views (a getter's read answered) in the app's collection again: its
    // kind, holes and own members, as a replay builds it (list-shapes.ts: adversary 115).
    return {
      wire: items.map((item) => item.wire),
      value: same
        ? promised
        : shapedList(
            items.map((item) => item.value),
            listShape(value),
          ),
    };
  }
  if (graphql.isLeafType(type)) return { wire: leafWire(type.serialize(value)), value: promised };
  // Its member as `readAhead` told it (`resolveType()` called once, ahead: adversary 115).
  const told = ahead && 'member' in ahead ? ahead : undefined;
  const concrete = graphql.isObjectType(type)
    ? type
    : (typeOf(graphql, schema, value) ??
      (told ? told.member : await memberType(graphql, schema, type, value, walk.call, at)));
  if (!concrete || typeof value !== 'object') {
    if (typeof value === 'object') {
      losses.push({
        type: type.name,
        what:
          "neither its resolveType() nor its members' isTypeOf() told its member outside the " +
          'answer, so a replay has its data as JSON, and no __typename to tell the member by',
      });
    }
    return { wire: jsonCopy(value), value: promised };
  }
  const fields = concrete.getFields();
  const selected = fieldsOf(walk, concrete, nodes);
  const source = value as Record<string, unknown>;
  // Its member told only now (an async `resolveType()`): read now, before any await.
  const reads =
    ahead && 'reads' in ahead ? ahead : readObjectAhead(walk, concrete, source, nodes, at);
  const wire: Record<string, unknown> = {};
  // What the resolvers of its fields read of it that the wire form would change (see above).
  const kept: Record<string, unknown> = {};
  // What a resolver reading its parent may read beyond the selection: a `@ResolveField()` of
  // it; or, under an instance of the class Nest built its type from (or of a subclass) that
  // class-transformer serializes (its `@Transform()`, `@Expose()`, `@Exclude()`, `@Type()`),
  // what an outer serializer reads again on a replay: a transform may read any of it
  // (`obj.visibility`, `obj.owner.hidden`, a `@Type()`d JSON column's members). All of it,
  // in the whole subtree, or a transform that reads what was left out would answer otherwise
  // (a masked field shown).
  const instance = isOfNestType(concrete.name, source);
  // A class class-transformer knows that is not the Nest type's (nor one it extends): an entity
  // class returned for a model type, or a subclass with decorators of its own. A replay names
  // it, or the serializer would not find its transforms (adversary 48a: a masked email shown).
  const decorated = transformedClassOf(source);
  const nest = nestTarget(concrete.name);
  const ownClass =
    decorated &&
    !(instance && (decorated === nest || Object.prototype.isPrototypeOf.call(decorated, nest!)))
      ? decorated
      : undefined;
  const byClass =
    whole === 'class' ||
    ownClass !== undefined ||
    (instance && hasClassMetadata(nestTarget(concrete.name)!));
  // A selected field's code of the app's (a `@ResolveField()`, a loader) may read any of its
  // parent's data (adversary 74). Field middleware never runs on a replay (its output is
  // stored as the answer gave it: middleware-outputs.ts), so it keeps nothing of it.
  const resolutions = [...selected.keys()].map((name) => fieldResolution(concrete, name));
  const keeping = parentKeeping({
    byClass,
    selectsAppField: resolutions.includes('app'),
    hasAppField: hasAppField(concrete),
    underAppParent: whole === 'data',
  });
  /** Its own data for the app's resolvers that the answer does not hold (`PARENT`). */
  const parent: Record<string, unknown> = {};
  // Its own data that is no field (a column kept out of the schema, a raw `bytea`): in
  // `PARENT`, what a replay may do without when the answer would be too large (adversary 93:
  // a 30 kB `content` no field exposes refused a rename as too large); in `KEPT` its own
  // `__typename` (the app's tag, which the answer is) and all of it for a serializer outside.
  // Its fields are not read here: an unselected one may be a getter that loads or throws.
  // A field's place is the property Nest reads it by (a field renamed with `@Field({ name })`:
  // its property), never its schema name: the property's data is the field's, stored as it
  // (adversary 99); own data under a renamed field's schema name is data beside the fields
  // (adversary 100: a `@HideField() id` beside `@Field({ name: 'id' }) uuid`).
  const propertyOf = (name: string) => nestField(concrete.name, name)?.property;
  const places = fieldPlaces(Object.keys(fields), propertyOf);
  const renamedNames = renamedFieldNames(Object.keys(fields), propertyOf);
  // A getter among them that throws (a computed `eta` whose service is down, which GraphQL
  // never reads: no field) is left out alone and said, never failing the mutation's answer
  // (adversary 108).
  const throwing: string[] = [];
  for (const name of Object.keys(source)) {
    if (places.has(name)) continue;
    const read = readOwn(source, name);
    if (!read) {
      throwing.push(name);
      continue;
    }
    defineOwn(
      besideFieldsMember(name, byClass, renamedNames) === 'kept' ? kept : parent,
      name,
      read.value,
    );
  }
  // Its own members under symbols (an app's tag out of JSON's sight: adversary 103), for its
  // resolvers; one no other process knows is named as not kept (see typed-graph.ts).
  for (const symbol of Object.getOwnPropertySymbols(source)) {
    if (Object.prototype.propertyIsEnumerable.call(source, symbol)) {
      const read = readOwn(source, symbol);
      if (read) defineOwnSymbol(parent, symbol, read.value);
      else throwing.push(String(symbol));
    }
  }
  // Its own data that is not enumerable (a back-reference kept out of JSON: `line.order`), for
  // its resolvers, not enumerable again on a replay (hidden-members.ts: adversary 111).
  for (const key of Reflect.ownKeys(source)) {
    if (typeof key === 'string' ? places.has(key) : Symbol.keyFor(key) === undefined) continue;
    const descriptor = Reflect.getOwnPropertyDescriptor(source, key)!;
    if (keptMember(descriptor, true) !== 'hidden') continue;
    Object.defineProperty(parent, key, {
      value: descriptor.value as unknown,
      enumerable: false,
      writable: descriptor.writable === true,
      configurable: true,
    });
  }
  if (throwing.length > 0) {
    losses.push({
      type: concrete.name,
      what: `its own ${throwing.join(', ')}, whose getters threw when read, is not kept`,
    });
  }
  if (keeping.unselected !== 'none') {
    for (const [name, item] of Object.entries(ownData(source, concrete.name, fields, selected))) {
      const into =
        keeping.unselected === 'kept' ? besideFieldsMember(name, true, renamedNames) : 'parent';
      defineOwn(into === 'kept' ? kept : parent, name, item);
    }
  }
  const methods: string[] = [];
  /** Selected fields it gave through its class (see `FROM_CLASS`). */
  const fromClass: string[] = [];
  /** Selected fields it gave through a getter (`ACCESSORS`), and as a Promise (`PROMISED`). */
  const accessors: string[] = [];
  const promisedFields: string[] = [];
  /** Selected fields whose reading failed, with their errors (see `FAILED`). */
  const failed: Record<string, FieldError> = {};
  /** Selected fields it did not have (`ABSENT`). */
  const absent: string[] = [];
  /** The properties of its selected fields the answer holds (see record-in-node.ts). */
  const answered = new Set<string>();
  /** Scalar fields whose value held objects of classes a serializer knows (`LEAF_CLASS`). */
  const leafClasses: Record<string, ClassTree> = {};
  /**
   * Selected fields whose first answer is the value the library read, not the resolver's own
   * (a list read, a getter's or a Promise's value).
   */
  const replaced: Record<string, unknown> = {};
  /** Its getter fields' reads under their later aliases, each answered apart (`ALIASED`). */
  const aliased: Record<string, Record<string, { v: unknown } | { e: FieldError }>> = {};
  /** Those reads as the first answer gives them at this place, by property and key. */
  const aliasAnswers: { property: string; key: string; item: unknown }[] = [];
  // Each selected field in its wire form, read as GraphQL's default resolver reads it (a
  // class's getters included). A method is stored as null: GraphQL calls it with the
  // operation's arguments, which are not known here.
  for (const [name, fieldNodes] of selected) {
    const field = fields[name];
    if (!field) continue;
    const resolution = fieldResolution(concrete, name);
    if (resolution === 'app') {
      // The app's `@ResolveField()` (or loader) answers it, at the first call and again on a
      // replay, from its parent: the parent's own data of that name is its input (a raw column the
      // resolver maps: lowercase text to an enum, a BigInt to an ID), kept as it is, never
      // written with the field's type, which it need not fit.
      // Read where Nest hands it to the resolver's `@Parent()`: the field's property (a field
      // renamed with `@Field({ name })`: `priceCents` under `price`, adversary 101), kept by
      // its schema name, which a replay writes at that property again.
      const property = nestField(concrete.name, name)?.property ?? name;
      if (readsGetterUnderApp(concrete, source, name)) {
        // A `@Field()` getter under a wrapper the library takes for the app's (a directive's
        // `@upper`): read once, at its turn (`readObjectAhead`), given to the wrapper through
        // the first answer's Proxy, and kept as its input for the replay, whose plain object
        // has no getter (wrapped-getters.ts, adversary 115).
        const read =
          reads.reads.get(responseKeys(fieldNodes)[0]) ?? readGiven(() => source[property]);
        const settled = await settledRead(read);
        if (settled instanceof FailedRead) {
          replaced[property] = settled;
        } else {
          defineOwn(kept, name, settled.value);
          replaced[property] =
            'promised' in read && isThenable(read.promised)
              ? Promise.resolve(settled.value)
              : settled.value;
        }
        continue;
      }
      const own = ownValue(source, property);
      if (own) defineOwn(kept, name, own.value);
      continue;
    }
    if (resolution === 'middleware') {
      // Behind field middleware: its output is stored as the operation's answer gave it, at
      // the answer (middleware-outputs.ts), and a replay answers that, never running the
      // middleware. Its input is never read through a getter here: a getter, an iterator, a
      // lazy relation is read by the middleware alone, once. Its own data is what the app's
      // resolvers of the object read (the raw email a mask hides: adversary 90).
      if (keeping.selectedInputs) {
        const property = nestField(concrete.name, name)?.property ?? name;
        const input = ownValue(source, property);
        if (input) defineOwn(parent, property, input.value);
      }
      continue;
    }
    // Read as Nest reads it, where Nest built the type: its class property (a field renamed
    // with `@Field({ name })`), its `defaultValue` where that is undefined. Behind field
    // middleware too: Nest's read of the property is what its `next()` gives, so a getter's
    // value and a Promise's are stored as for any field (adversary 75).
    const reading = nestField(concrete.name, name);
    const property = reading?.property ?? name;
    if (!(property in source) && !reading?.fallback) {
      // Selected and absent: the first answer is null (or the app's resolver's), and so is
      // a replay's, rather than the refusal of a field the first answer did not select.
      wire[name] = null;
      absent.push(name);
      continue;
    }
    // Given through its class (a getter), or its own but not enumerable (defined so): either
    // way a serializer's copy of its own enumerable data leaves it out (adversary 50a).
    if (property in source && !Object.prototype.propertyIsEnumerable.call(source, property)) {
      fromClass.push(name);
    }
    let item: unknown;
    let promisedItem: unknown;
    /**
     * A getter that threw, a Promise that rejected (a signing service down), an iterator that
     * threw while read: GraphQL answers the field null with its error at its path (its nearest
     * nullable parent when it is non-null), and the mutation's work stands. Stored so, and
     * thrown again by a replay. The first answer fails there too, with this error, never read
     * again (adversary 58: a signing service down once would give the client a link its
     * retries never get).
     */
    const failRead = (error: unknown) => {
      failed[name] = isThenable(promisedItem)
        ? { ...fieldError(error), rejected: true }
        : fieldError(error);
      replaced[property] = new FailedRead(error, isThenable(promisedItem));
    };
    /** Read as Nest reads it: the property, its `defaultValue` where that is undefined. */
    const readOnce = () => {
      const own = property in source ? source[property] : undefined;
      return own === undefined && reading?.fallback ? reading.fallback.value : own;
    };
    // A getter's leaf under several aliases is read once per response key, as GraphQL reads
    // it, each at its key's turn (read ahead: `readObjectAhead`; alias-reads.ts: a URL signed
    // afresh per read answers each alias its own signature). Read here only where nothing was
    // read ahead.
    const keys = responseKeys(fieldNodes);
    const perAlias = readsPerAlias({
      getter: readsThroughAccessor(source, property),
      leaf: graphql.isLeafType(graphql.getNamedType(field.type)),
      keys: keys.length,
      wrapped: wrapsField(field),
    });
    const readAliases = () =>
      perAlias ? keys.slice(1).map((key) => ({ key, ...readGiven(readOnce) })) : [];
    let aliasReads: ReturnType<typeof readAliases> = [];
    // Read ahead in graphql-js's order (`readObjectAhead`), each key where it comes.
    const first = reads.reads.get(keys[0]);
    try {
      let own: unknown;
      if (first) {
        aliasReads = perAlias
          ? keys.slice(1).map((key) => ({ key, ...(reads.reads.get(key) ?? readGiven(readOnce)) }))
          : [];
        if ('error' in first) throw first.error;
        own = first.promised;
      } else {
        try {
          own = property in source ? source[property] : undefined;
        } finally {
          aliasReads = readAliases();
        }
      }
      promisedItem = own === undefined && reading?.fallback ? reading.fallback.value : own;
      // Filled in by its `defaultValue`: the app's resolvers read the property, `undefined`
      // (adversary 90); GraphQL's read of it on a replay fills it in again, as Nest's does.
      if (own === undefined && reading?.fallback && keeping.selectedInputs) {
        defineOwn(parent, property, undefined);
      }
      if (typeof promisedItem === 'function') {
        methods.push(name);
        wire[name] = null;
        continue;
      }
      item = isThenable(promisedItem) ? await promisedItem : promisedItem;
      // A list field's iterable read here, where a throw fails this field alone (at its path,
      // null where it is nullable), as graphql-js' `completeListValue` fails it: a generator
      // that throws part way (adversary 116: the whole mutation failed).
      if (graphql.isListType(graphql.getNullableType(field.type))) materialized(walk, item);
    } catch (error) {
      failRead(error);
      await storeAliasReads(walk, field.type, fieldNodes, { failed: true }, aliasReads, {
        name,
        property,
        aliased,
        answers: aliasAnswers,
      });
      continue;
    }
    const stored = await walkValue(
      walk,
      field.type,
      item,
      fieldNodes,
      keeping.children,
      place && fieldPlace(place, fieldNodes),
      isThenable(promisedItem) ? undefined : reads.under.get(name),
      fieldAt(at, concrete, name, field.type, fieldNodes, keys[0]),
    );
    wire[name] = stored.wire;
    answered.add(property);
    await storeAliasReads(walk, field.type, fieldNodes, { wire: stored.wire }, aliasReads, {
      name,
      property,
      aliased,
      answers: aliasAnswers,
    });
    // What of a list its wire form (its items) does not hold: its kind (a Set), its holes,
    // its own members that are no items (a page's `total`). Kept for the app's resolvers, the
    // rebuilt list made of that shape again (list-shapes.ts: adversaries 112, 115).
    const listField = graphql.isListType(graphql.getNullableType(field.type));
    if (keeping.selectedInputs && (listField || Array.isArray(item))) {
      const shape = listShape(item);
      if (shape) defineOwn(parent, property, shape);
      // The array itself where the graph holds it elsewhere (`writeParents`: adversary 114).
      if (Array.isArray(item)) walk.selectedLists.push({ record: parent, property, list: item });
    }
    if (graphql.isLeafType(graphql.getNamedType(field.type))) {
      const tree = classTreeNoting(item, `its field ${name}`, concrete.name, losses);
      if (tree) leafClasses[name] = tree;
    }
    // The first answer is given what was stored: a list as it was read, and a getter's value
    // or a Promise's as the library read it, never read again by GraphQL (a getter that signs
    // a URL afresh, or fails once, would give the client what the store does not hold:
    // adversary 58).
    const throughAccessor = readsThroughAccessor(source, property);
    // A getter of its class, not its own (an object literal's `get label()` is its own key,
    // which a copy of its own keys keeps: adversary 68).
    if (throughAccessor && !Object.prototype.hasOwnProperty.call(source, property)) {
      accessors.push(name);
    }
    if (isThenable(promisedItem)) {
      // A Promise still, as the resolver's was (its parent's `@ResolveField()` may `.then()`
      // it), of the value the library read.
      promisedFields.push(name);
      replaced[property] = Promise.resolve(stored.value);
    } else if (stored.value !== item || throughAccessor) {
      replaced[property] = stored.value;
    }
    const back = fromWireAgain(graphql, schema, field.type, wire[name], item);
    if (back.same) continue;
    if (keepsExactly(item)) {
      defineOwn(kept, name, item);
    } else {
      losses.push({
        type: concrete.name,
        what:
          `its field ${name} (${describeValue(item)}) comes back as its scalar ` +
          `${graphql.getNamedType(field.type).name}'s parseValue() reads it ` +
          `(${describeValue(back.value)})`,
      });
    }
  }
  // A member of a union or an interface says which, for the replay to read it back by.
  if (!graphql.isObjectType(type)) wire.__typename = concrete.name;
  if (Object.keys(failed).length > 0) wire[FAILED] = failed;
  if (fromClass.length > 0) wire[FROM_CLASS] = fromClass;
  // Written wherever FROM_CLASS is (empty too), so that a record without it is one stored
  // before it, whose FROM_CLASS names its getters' fields (see `fromWire`).
  if (accessors.length > 0 || fromClass.length > 0) wire[ACCESSORS] = accessors;
  if (promisedFields.length > 0) wire[PROMISED] = promisedFields;
  if (Object.keys(aliased).length > 0) wire[ALIASED] = aliased;
  if (Object.keys(leafClasses).length > 0) wire[LEAF_CLASS] = leafClasses;
  const absentFields = notedAbsentFields(
    absent,
    keeping.unselected !== 'none' || keeping.selectedInputs,
  );
  if (absentFields) wire[ABSENT] = absentFields;
  writeKept(walk, wire, kept, concrete.name, source);
  writeParent(walk, wire, parent, source, concrete.name, answered);
  if (keeping.unselected !== 'none' || keeping.selectedInputs) {
    // The first call's order of its own keys, where a replay would rebuild another: its
    // stored fields at their places first, then its data (see key-order.ts).
    const placeOf = (name: string) => propertyOf(name) ?? name;
    const order = storedKeyOrder(
      Object.keys(source),
      rebuiltOrder(
        Object.keys(wire)
          .filter((name) => !LIBRARY_MEMBERS.has(name) && name in fields)
          .map(placeOf),
        Object.keys(parent),
        Object.keys(kept).map((name) => (name in fields ? placeOf(name) : name)),
      ),
    );
    if (order) wire[KEYS] = order;
  }
  if (PARENT in wire) walk.parents.push(wire);
  if (ownClass || (instance && byClass)) {
    const gotten = classGetters(source, fields);
    if (Object.keys(gotten).length > 0) {
      const typed = keepData(gotten);
      wire[GOTTEN] = typed.kept;
      // What of it was of classes a serializer knows (an exposed getter's entity).
      const tree = classTreeNoting(gotten, 'a getter of it', concrete.name, losses);
      if (tree) wire[GOTTEN_CLASSES] = tree;
      if (typed.unfaithful.length > 0) {
        losses.push({
          type: concrete.name,
          what: `what its getters ${typed.unfaithful.map((m) => m.name).join(', ')} gave does not come back as it was`,
        });
      }
    }
  }
  if (ownClass) {
    wire[INSTANCE] = ownClass.name;
    if (transformedClassNamed(ownClass.name) !== ownClass) {
      losses.push({
        type: concrete.name,
        what:
          `its class ${ownClass.name} is not the only class of that name class-transformer ` +
          'knows: a replay cannot tell which to serialize it as, and answers an error there',
      });
    }
  } else if (instance) wire[INSTANCE] = true;
  else if (hasNoPrototype(source)) wire[INSTANCE] = null;
  const members = classMembers(source, fields);
  if (members.length > 0) {
    losses.push({
      type: concrete.name,
      what:
        `a replay has it as a plain object, not as ${describeValue(source)}, without ` +
        `${members.join(', ')} of its class`,
    });
  }
  if (methods.length > 0) {
    losses.push({
      type: concrete.name,
      what:
        `its field ${methods.join(', ')} is a method of the value, which GraphQL calls with ` +
        "the field's arguments: a replay has no value for it",
    });
  }
  // One object at several places (an order's `primary` line, also `lines[0]`) is walked at
  // each, and is ONE Proxy at all of them, as it is one object to the app without the
  // library: `line.order.primary === line` at each place (adversary 110: a Proxy per place).
  const seen = walk.views.get(source);
  if (seen) {
    givenAgain(walk.givens.get(source)!, seen, replaced, place);
    answerAliasesAt(seen, place, aliasAnswers);
    return { wire, value: seen };
  }
  if (Object.keys(replaced).length === 0) return { wire, value: promised };
  const given = new Map<PropertyKey, unknown>(Object.entries(replaced));
  const view = over(source, given, walk.views);
  // What a read through another Proxy gives of it, as the resolver's data reaches it
  // (`line.order`), and what its later places give.
  walk.views.set(source, view);
  walk.givens.set(source, given);
  answerAliasesAt(view, place, aliasAnswers);
  return { wire, value: view };
}

/**
 * What was read ahead of the walk under a value (`readAhead`): an object's reads, a list's
 * items', what is read once an async `resolveType()` tells the member (`settled`), a member
 * its type's `resolveType()` told none of (`member: undefined`); undefined where nothing was
 * (a leaf, a Promise, which the walk reads under when it comes to it).
 */
type ReadAhead =
  | ObjectReads
  | { readonly items: readonly (ReadAhead | undefined)[] }
  | { readonly settled: Promise<ReadAhead | undefined> }
  | { readonly member: undefined };

/** An object's fields' reads made ahead, and what was read ahead under each. */
interface ObjectReads {
  /** Its member, where a union's or an interface's `resolveType()` told it (`memberAhead`). */
  readonly member?: GraphQLObjectType;
  /** Each read, by the response key it was read under. */
  readonly reads: ReadonlyMap<string, { promised: unknown } | { error: unknown }>;
  /** What was read under each field's first key's value, by field name. */
  readonly under: ReadonlyMap<string, ReadAhead | undefined>;
}

/**
 * Reads `value`'s selected fields as graphql-js executes them (read-order.ts): an object's
 * fields by response key, each field's value completed depth-first before the next key, a
 * list's items one after the other, each item's fields before the next item's; nothing under
 * a Promise, which graphql-js completes once it settles (the walk reads it then). Synchronous:
 * nothing is awaited between two reads, so nothing else runs between them. Each value once
 * per place, as the walk walks it: linear in what the walk walks.
 */
function readAhead(
  walk: Walk,
  type: GraphQLOutputType,
  value: unknown,
  nodes: readonly FieldNode[],
  at: FieldAt | undefined,
): ReadAhead | undefined {
  const { graphql, schema } = walk;
  if (value === null || value === undefined) return undefined;
  // Under a Promise: read when the walk comes to it, in selection order, not as it settles
  // (a stated limit, docs/guides/graphql.md: two lazy relations loaded on the key's
  // transaction settle in the order the app sent their queries, which its one client runs one
  // after the other, not in the order they settle without the library: adversary 115).
  if (isThenable(value)) return undefined;
  if (graphql.isNonNullType(type)) return readAhead(walk, type.ofType, value, nodes, at);
  if (graphql.isListType(type)) {
    return {
      items: materialized(walk, value).map((item, index) =>
        readAhead(walk, type.ofType, item, nodes, itemAt(at, index)),
      ),
    };
  }
  if (graphql.isLeafType(type) || typeof value !== 'object') return undefined;
  const source = value as Record<string, unknown>;
  const concrete = graphql.isObjectType(type) ? type : typeOf(graphql, schema, value);
  if (concrete) return readObjectAhead(walk, concrete, source, nodes, at);
  // A union's or an interface's member, told as graphql-js tells it when it completes the
  // value: synchronously where `resolveType()` answers so (Nest's usual form), and read there;
  // once its Promise settles otherwise (adversary 115).
  const told = memberAhead(walk, type as GraphQLAbstractType, value, at);
  const readMember = (member: GraphQLObjectType | undefined): ReadAhead =>
    member ? { ...readObjectAhead(walk, member, source, nodes, at), member } : { member };
  if (isThenable(told)) {
    return { settled: told.then((member) => readOrNone(() => readMember(member)), none) };
  }
  return readMember(told);
}

/** Nothing read ahead (a rejected Promise: the walk meets its rejection itself). */
const none = (): undefined => undefined;

/**
 * A read ahead made in a Promise's reaction: one that throws (an iterator that throws as it
 * is read) is left to the walk, which meets it as it always did; it must not reject a Promise
 * nobody awaits.
 */
function readOrNone(read: () => ReadAhead | undefined): ReadAhead | undefined {
  try {
    return read();
  } catch {
    return undefined;
  }
}

/**
 * The member of a union or an interface its type tells for `value`, as graphql-js's
 * `completeAbstractValue` tells it: the type's `resolveType()`, or graphql-js's own
 * `defaultTypeResolver` (`__typename`, then each member's `isTypeOf()`), called once, with
 * the operation's context and info (see `memberType`). A Promise where it answers one; none
 * where it throws or names no object type of the schema.
 */
function memberAhead(
  walk: Walk,
  type: GraphQLAbstractType,
  value: unknown,
  at: FieldAt | undefined,
): GraphQLObjectType | undefined | Promise<GraphQLObjectType | undefined> {
  const { graphql, schema, call } = walk;
  if (!schema || !call) return undefined;
  const info = memberInfo(call.info, at);
  const named = (name: unknown) => {
    const resolved = typeof name === 'string' ? schema.getType(name) : undefined;
    const member = resolved && graphql.isObjectType(resolved) ? resolved : undefined;
    // graphql-js' own call for it answered this member (told-members.ts): told once.
    if (member) noteToldMember(call.context, value, pathOf(info), member.name);
    return member;
  };
  try {
    const resolve = type.resolveType ?? graphql.defaultTypeResolver;
    const told: unknown = resolve(value, call.context, info, type);
    return isThenable(told) ? Promise.resolve(told).then(named, none) : named(told);
  } catch {
    return undefined;
  }
}

/**
 * An object's reads (see `readAhead`), of the fields the walk reads as they are read there:
 * a field the app's resolver or its middleware answers is not read, nor one it does not have.
 */
function readObjectAhead(
  walk: Walk,
  concrete: GraphQLObjectType,
  source: Record<string, unknown>,
  nodes: readonly FieldNode[],
  at: FieldAt | undefined,
): ObjectReads {
  const { graphql } = walk;
  const fields = concrete.getFields();
  const selected = fieldsOf(walk, concrete, nodes);
  const reads = new Map<string, { promised: unknown } | { error: unknown }>();
  const under = new Map<string, ReadAhead | undefined>();
  const readable = (name: string) => {
    if (!fields[name]) return undefined;
    const resolution = fieldResolution(concrete, name);
    const read =
      resolution === 'property' ||
      (resolution === 'app' && readsGetterUnderApp(concrete, source, name));
    if (!read) return undefined;
    const reading = nestField(concrete.name, name);
    const property = reading?.property ?? name;
    if (!(property in source) && !reading?.fallback) return undefined;
    return { field: fields[name], reading, property };
  };
  const perAlias = (name: string) => {
    const field = readable(name);
    return (
      field !== undefined &&
      fieldResolution(concrete, name) === 'property' &&
      readsPerAlias({
        getter: readsThroughAccessor(source, field.property),
        leaf: graphql.isLeafType(graphql.getNamedType(field.field.type)),
        keys: responseKeys(selected.get(name) ?? []).length,
        wrapped: wrapsField(field.field),
      })
    );
  };
  for (const { name, key, first } of readOrder(orderedNodes(walk, concrete, nodes), perAlias)) {
    const field = readable(name);
    if (!field) continue;
    const { reading, property } = field;
    if (!first) {
      // As the walk reads a later alias: through its `defaultValue` where undefined.
      const later = readGiven(() => {
        const own = property in source ? source[property] : undefined;
        return own === undefined && reading?.fallback ? reading.fallback.value : own;
      });
      reads.set(key, later);
      // A later alias's one-shot list (a generator) iterated now, at its own key's turn, as
      // graphql-js completes it before the next key: the walk reaches it only after the
      // object's other reads (`materialized` keeps the items read; a per-alias field is a
      // leaf's, so nothing under it is read ahead) (adversary 115).
      if ('promised' in later) {
        const within = fieldAt(at, concrete, name, field.field.type, [], key);
        readOrNone(() => readAhead(walk, field.field.type, later.promised, [], within));
      }
      continue;
    }
    const read = readGiven(() => (property in source ? source[property] : undefined));
    reads.set(key, read);
    if (!('promised' in read)) continue;
    const item =
      read.promised === undefined && reading?.fallback ? reading.fallback.value : read.promised;
    // Under a wrapper's field (`readsGetterUnderApp`) the wrapper's answer is completed, not
    // walked: nothing under it is read ahead.
    if (typeof item === 'function' || fieldResolution(concrete, name) !== 'property') continue;
    const fieldNodes = selected.get(name) ?? [];
    const within = fieldAt(at, concrete, name, field.field.type, fieldNodes, key);
    // One that throws (a generator that fails part way) fails its field alone: the walk meets
    // the error again at the field (`materialized`), as graphql-js meets it there.
    under.set(
      name,
      readOrNone(() => readAhead(walk, field.field.type, item, fieldNodes, within)),
    );
  }
  return { reads, under };
}

/** The field nodes `nodes` collect for `type`, in graphql-js's order (see `readOrder`), once. */
function orderedNodes(
  walk: Walk,
  type: GraphQLObjectType,
  nodes: readonly FieldNode[],
): FieldNode[] {
  let byType = walk.ordered.get(nodes);
  if (!byType) walk.ordered.set(nodes, (byType = new Map()));
  let ordered = byType.get(type);
  if (!ordered) {
    ordered = collectedNodes(walk.graphql, walk.schema, type, { ...walk.selection, nodes });
    byType.set(type, ordered);
  }
  return ordered;
}

/**
 * Whether the walk reads a field's getter although the field's resolver is taken for the app's
 * (wrapped-getters.ts): a `@Field()` getter under a schema transform's wrapper.
 */
function readsGetterUnderApp(concrete: GraphQLObjectType, source: object, name: string): boolean {
  const nest = nestField(concrete.name, name);
  return readsWrappedGetter({
    resolveField: isResolveField(concrete, name),
    nestField: nest !== undefined,
    getter: readsThroughAccessor(source, nest?.property ?? name),
  });
}

/** A read (`readGiven`) settled: its value, a Promise's awaited, or its failure. */
async function settledRead(
  read: { promised: unknown } | { error: unknown },
): Promise<{ value: unknown } | FailedRead> {
  if ('error' in read) return new FailedRead(read.error, false);
  try {
    return { value: isThenable(read.promised) ? await read.promised : read.promised };
  } catch (error) {
    return new FailedRead(error, true);
  }
}

/** A read of a field (`read`), as it went: its value, or what it threw. */
function readGiven(read: () => unknown): { promised: unknown } | { error: unknown } {
  try {
    return { promised: read() };
  } catch (error) {
    return { error };
  }
}

/**
 * A getter field's reads under its later aliases (`reads`: alias-reads.ts), each awaited as
 * GraphQL awaits it and written in its wire form: where one answers otherwise than the first
 * key (`first`), stored for a replay (`aliased`, the object's `ALIASED`) and noted for the
 * first answer (`answers`: what reading it gives there, a failure as it failed).
 */
async function storeAliasReads(
  walk: Walk,
  type: GraphQLOutputType,
  nodes: readonly FieldNode[],
  first: AliasRead,
  reads: readonly ({ key: string } & ({ promised: unknown } | { error: unknown }))[],
  into: {
    name: string;
    property: string;
    aliased: Record<string, Record<string, { v: unknown } | { e: FieldError }>>;
    answers: { property: string; key: string; item: unknown }[];
  },
): Promise<void> {
  if (reads.length === 0) return;
  const made: {
    key: string;
    read: AliasRead;
    stored: { v: unknown } | { e: FieldError };
    item: unknown;
  }[] = [];
  for (const read of reads) {
    const promised = 'promised' in read ? read.promised : undefined;
    let failure = 'error' in read ? new FailedRead(read.error, false) : undefined;
    let value: unknown;
    if (!failure) {
      try {
        value = isThenable(promised) ? await promised : promised;
      } catch (error) {
        failure = new FailedRead(error, true);
      }
    }
    if (failure) {
      const error = fieldError(failure.error);
      const stored = { e: failure.rejected ? { ...error, rejected: true as const } : error };
      made.push({ key: read.key, read: { failed: true }, stored, item: failure });
      continue;
    }
    // A leaf's (or a list of leaves'): nothing under it is selected or placed.
    const walked = await walkValue(walk, type, value, nodes);
    const { wire } = walked;
    // What the walk gives of the read (the list a one-shot iterable gave, as the first key's
    // field is given: a generator is spent once read), a Promise still where the getter gave
    // one, as the first key's is (`PROMISED`) (adversary 115).
    const item = isThenable(promised) ? Promise.resolve(walked.value) : walked.value;
    made.push({ key: read.key, read: { wire }, stored: { v: wire }, item });
  }
  const apart = aliasesApart(first, made);
  if (apart.length === 0) return;
  into.aliased[into.name] = Object.fromEntries(apart.map(({ key, stored }) => [key, stored]));
  for (const { key, item } of apart) into.answers.push({ property: into.property, key, item });
}

/**
 * Its aliases' own reads (`storeAliasReads`) answered by the object the first answer gives at
 * `place` (its Proxy), each to its response key (placed-reads.ts).
 */
function answerAliasesAt(
  view: object,
  place: Place | undefined,
  answers: readonly { property: string; key: string; item: unknown }[],
): void {
  if (!place) return;
  for (const { property, key, item } of answers) {
    notePlacedRead(view, place, property, () => asRead(item), key);
  }
}

/**
 * A later place's reads of an object (`replaced`) given to its one Proxy (`view`, answering
 * `given`): a field no earlier place read is answered from then on; one read otherwise (a
 * getter signing afresh, a list read again) is answered at that place only, as GraphQL's read
 * there gave it without the library (placed-reads.ts); the Proxy keeps the first read.
 */
function givenAgain(
  given: Map<PropertyKey, unknown>,
  view: object,
  replaced: Record<string, unknown>,
  place: Place | undefined,
): void {
  for (const [property, item] of Object.entries(replaced)) {
    const earlier = given.has(property) ? { value: given.get(property) } : undefined;
    const read = laterRead(earlier, item);
    if (read === 'add') given.set(property, item);
    else if (read === 'placed' && place) notePlacedRead(view, place, property, () => asRead(item));
  }
}

/** What reading a field the library read gives (see `over`): a failure as it failed. */
function asRead(item: unknown): unknown {
  if (!(item instanceof FailedRead)) return item;
  return item.rejected ? item.rejection : throwing(item.error);
}

/**
 * The empty replay object naming the class a stored object was an instance of (`INSTANCE`):
 * `true` for the class Nest built its type from, a name for another class class-transformer
 * knows. A name it does not know as one class is refused, never answered as a bare object: a
 * serializer would then skip the class's transforms (a masked field shown).
 */
function namedPlain(type: string, named: unknown): object | undefined {
  if (named === true) return plainOfNestType(type);
  if (typeof named !== 'string') return undefined;
  const target = transformedClassNamed(named);
  if (!target) {
    throw new Error(
      `the stored answer's ${type} was an instance of ${named}, which class-transformer does ` +
        'not know as one class in this process: replayed without it, its transforms would ' +
        'not apply',
    );
  }
  return plainNaming(target);
}

/** The fields `nodes` select of an object of `type` (see `selectedFields`), collected once. */
function fieldsOf(
  walk: Walk,
  type: GraphQLObjectType,
  nodes: readonly FieldNode[],
): Map<string, FieldNode[]> {
  let byType = walk.collected.get(nodes);
  if (!byType) walk.collected.set(nodes, (byType = new Map()));
  let fields = byType.get(type);
  if (!fields) {
    fields = selectedFields(walk.graphql, walk.schema, type, { ...walk.selection, nodes });
    byType.set(type, fields);
  }
  return fields;
}

/**
 * How much of a value's unselected data a walk keeps (see `walkValue`): all of it for a
 * serializer (`'class'`), or for the app's resolvers of an object above it (`'data'`: see
 * parent-keeping.ts).
 */
type Whole = false | 'class' | 'data';

/** An own member's value, or undefined where reading it threw (a getter's error). */
function readOwn(source: object, key: string | symbol): { value: unknown } | undefined {
  try {
    return { value: (source as Record<string | symbol, unknown>)[key] };
  } catch {
    return undefined;
  }
}

/** The object's own data property of that name (never a getter, a Promise or a method). */
function ownValue(source: object, name: string): { value: unknown } | undefined {
  const own = Object.getOwnPropertyDescriptor(source, name);
  if (!own || !('value' in own)) return undefined;
  const item: unknown = own.value;
  if (typeof item === 'function' || isThenable(item)) return undefined;
  return { value: item };
}

/**
 * The own data of the object's unselected fields, for a `@ResolveField()` of it that reads
 * its parent: only plain data properties, so that nothing unselected is called or loaded (a
 * TypeORM lazy relation is a getter, its loaded value a Promise).
 */
function ownData(
  source: object,
  type: string,
  fields: Readonly<Record<string, unknown>>,
  selected: ReadonlyMap<string, unknown>,
): Record<string, unknown> {
  const data: Record<string, unknown> = {};
  for (const name of Object.keys(fields)) {
    if (selected.has(name)) continue;
    // Where the app's resolvers read it, as Nest does: its property (a renamed field's).
    const property = nestField(type, name)?.property ?? name;
    const own = ownValue(source, property);
    if (own) defineOwn(data, property, own.value);
  }
  return data;
}

/**
 * The value as its first answer reads it where a field of it was read by storing it (a list,
 * a getter, a Promise): the resolver's value itself, seen through a Proxy that gives the
 * fields that were read as the library read them (a getter never run again, a list as it was
 * read, a failure as it failed). Everything else is the value's own: its class, its own keys
 * and their enumerability (a serializer copies what it would have copied), its getters,
 * setters and methods run on the value itself (its `#private` fields, a Prisma result's
 * computed fields: adversary 62). What an outer layer writes to it (an interceptor masking a
 * field) goes to the value, and is what is read from then on (adversary 65). The Proxy's
 * target is a stand-in of the value's class, so that a frozen value's fields can be answered
 * too (a one-shot iterator it holds was read). The resolver's value is not changed. An object
 * of its data that the walk saw through a Proxy too (`views`: a line's `order`, the order the
 * answer holds) is read as that Proxy, as without the library it is the object GraphQL hands
 * the app's resolvers (first-answer-view.ts: `line.order.lines.indexOf(line)`, adversary 108).
 */
function over(
  source: object,
  given: Map<PropertyKey, unknown>,
  views: WeakMap<object, object>,
): object {
  const standIn = Object.create(Object.getPrototypeOf(source) as object | null) as object;
  /** What reading `property` answers where the library read it (see `get`). */
  const answer = (property: PropertyKey): { value: unknown } | undefined => {
    if (!given.has(property)) return undefined;
    const item = given.get(property);
    if (!(item instanceof FailedRead)) return { value: item };
    return item.rejected ? { value: item.rejection } : undefined;
  };
  /**
   * The value's own property as the first answer has it: a field the library read is data
   * holding what it read, an own getter's too (a copy by descriptors, `Object.defineProperties
   * ({}, Object.getOwnPropertyDescriptors(v))`, must not run it again: adversary 68).
   */
  const ownOf = (property: PropertyKey): PropertyDescriptor | undefined => {
    const own = Reflect.getOwnPropertyDescriptor(source, property);
    const answered = own && answer(property);
    if (own && !answered && 'value' in own) return { ...own, value: seenThrough(own.value, views) };
    if (!own || !answered) return own;
    const { enumerable, configurable } = own;
    const writable = 'value' in own ? own.writable : own.set !== undefined;
    return { value: answered.value, writable, enumerable, configurable };
  };
  /**
   * Set once the Proxy must report its own properties from its target (a Proxy's rule, once a
   * property is non-configurable or the target non-extensible: `Object.freeze`, `seal`, a
   * `defineProperty` with `configurable: false`, by the app before or an outer layer after:
   * adversaries 66, 68): the stand-in then holds each of the value's own properties as the
   * first answer has them, kept as the value's from then on.
   */
  let settled = false;
  const settle = () => {
    if (settled) return;
    for (const key of Reflect.ownKeys(source)) Reflect.defineProperty(standIn, key, ownOf(key)!);
    settled = true;
  };
  if (!Object.isExtensible(source)) {
    settle();
    Object.preventExtensions(standIn);
  }
  const view = new Proxy(standIn, {
    get(_target, property) {
      if (given.has(property)) {
        const item = given.get(property);
        if (item instanceof FailedRead) {
          return item.rejected ? item.rejection : throwing(item.error);
        }
        return item;
      }
      const value: unknown = Reflect.get(source, property, source);
      // A method runs on the value itself, whose private fields are its own.
      if (typeof value === 'function' && property !== 'constructor') {
        return (value as (...args: unknown[]) => unknown).bind(source);
      }
      // Another object the answer sees through a Proxy is that Proxy (see above), but where
      // the stand-in holds it read-only for good, what it holds (the Proxy's rule: a line
      // frozen before its order's Proxy was made gives the raw order).
      const held = settled ? Reflect.getOwnPropertyDescriptor(_target, property) : undefined;
      if (held && !mayAnswerOtherwise(held)) return held.value as unknown;
      return seenThrough(value, views);
    },
    set(_target, property, value) {
      given.delete(property);
      const done = Reflect.set(source, property, value, source);
      if (done && settled) {
        const own = Reflect.getOwnPropertyDescriptor(source, property);
        if (own) Reflect.defineProperty(standIn, property, own);
      }
      return done;
    },
    defineProperty(_target, property, descriptor) {
      // A new value or accessor replaces what was read; a change of attributes alone
      // (`Object.freeze` making each key read-only) keeps it (adversary 68: a drained
      // iterator's list answered empty once frozen).
      const replaces = 'value' in descriptor || 'get' in descriptor || 'set' in descriptor;
      if (descriptor.configurable === false) settle();
      if (!Reflect.defineProperty(source, property, descriptor)) return false;
      if (replaces) given.delete(property);
      if (settled)
        Reflect.defineProperty(standIn, property, replaces ? descriptor : ownOf(property)!);
      return true;
    },
    deleteProperty(_target, property) {
      given.delete(property);
      const done = Reflect.deleteProperty(source, property);
      if (done && settled) Reflect.deleteProperty(standIn, property);
      return done;
    },
    preventExtensions() {
      Object.preventExtensions(source);
      settle();
      Object.preventExtensions(standIn);
      return true;
    },
    isExtensible: () => Reflect.isExtensible(standIn),
    has: (_target, property) => Reflect.has(source, property),
    ownKeys: () => Reflect.ownKeys(settled ? standIn : source),
    getOwnPropertyDescriptor(_target, property) {
      if (settled) return Reflect.getOwnPropertyDescriptor(standIn, property);
      const own = ownOf(property);
      // Configurable, as a property the stand-in does not have must be reported.
      return own && { ...own, configurable: true };
    },
  });
  // graphql-js tells its member by it: as told ahead of the object (told-members.ts).
  noteViewOf(view, source);
  return view;
}

/** A field whose reading failed as the library read it (see `over`). */
class FailedRead {
  /** Its rejection, where it was a Promise's: one, handled (a serializer may only copy it). */
  readonly rejection: Promise<never> | undefined;

  constructor(
    readonly error: unknown,
    readonly rejected: boolean,
  ) {
    if (rejected) {
      this.rejection = Promise.reject(error);
      this.rejection.catch(() => undefined);
    }
  }
}

function throwing(error: unknown): never {
  throw error;
}

/** Whether reading `property` of the value calls a getter (its own, or its class's). */
function readsThroughAccessor(source: object, property: string): boolean {
  for (let at: object | null = source; at; at = Object.getPrototypeOf(at) as object | null) {
    const descriptor = Object.getOwnPropertyDescriptor(at, property);
    if (descriptor) return descriptor.get !== undefined;
  }
  return false;
}

/**
 * A field's stored wire form read back as a replay reads it, and whether that is the value the
 * resolver gave. Only a leaf's (or a list of leaves') can differ: an object keeps its own. A
 * field that is there with `undefined` comes back `null` unless it is kept.
 */
function fromWireAgain(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
  type: GraphQLOutputType,
  wire: unknown,
  value: unknown,
): { same: boolean; value?: unknown } {
  if (value === undefined) return { same: false, value: null };
  if (!graphql.isLeafType(graphql.getNamedType(type))) return { same: true };
  const back = fromWire(graphql, schema, type, jsonCopy(wire));
  return { same: sameData(back, value), value: back };
}

/**
 * The member type of a union's or an interface's value that does not say (no `__typename`),
 * as GraphQL finds it: by the abstract type's `resolveType()`, called as GraphQL calls it for
 * the answer, or else by its members' `isTypeOf()`. Undefined when neither tells (the value
 * is then kept as JSON).
 */
async function memberType(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
  type: GraphQLAbstractType,
  value: unknown,
  call: ResolverCall | undefined,
  at?: FieldAt,
): Promise<GraphQLObjectType | undefined> {
  if (!schema || !call) return undefined;
  try {
    if (type.resolveType) {
      const name = await type.resolveType(value, call.context, memberInfo(call.info, at), type);
      const resolved = typeof name === 'string' ? schema.getType(name) : undefined;
      return resolved && graphql.isObjectType(resolved) ? resolved : undefined;
    }
    for (const member of schema.getPossibleTypes(type)) {
      if (await member.isTypeOf?.(value, call.context, memberInfo(call.info, at))) return member;
    }
  } catch {
    // A resolveType() that cannot tell outside the answer: kept as JSON, as before.
  }
  return undefined;
}

/** A Promise, or any value GraphQL awaits as one (it has a `then()`). */
function isThenable(value: unknown): value is PromiseLike<unknown> {
  return (
    typeof value === 'object' &&
    value !== null &&
    typeof (value as { then?: unknown }).then === 'function'
  );
}

/**
 * The warning for an object in a stored parent's own data (`PARENT`) of type `type` whose class
 * `className` is not one class class-transformer knows in this process: replayed plain.
 */
export function unnamedParentMessage(type: string, className: string): string {
  return (
    `a replayed ${type}'s own data (read by the app's resolvers, not in the answer) held an ` +
    `instance of ${className}, which class-transformer does not know as one class in this ` +
    'process (two classes of that name): replayed as plain data, its transforms not applied. ' +
    'Give the classes distinct names'
  );
}

/**
 * A stored wire value as a resolver's value again: each scalar through its `parseValue()`, and
 * each object's `KEPT` data as the resolver returned it. A value stored before `KEPT` was
 * (`format` 1) has its data that is no field as JSON beside its fields, and is read so.
 *
 * An object that was an instance of the class Nest built its type from is made one again, its
 * data its own (the layers outside the library that read its class see it as they saw the
 * first answer). A field the retry selects (`selection`, the retry's own) that the first call
 * did not is refused when read (see not-stored-field.ts); without a selection, every field
 * not stored is.
 */
export function fromWire(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
  type: GraphQLOutputType,
  wire: unknown,
  format: number = ANSWER_FORMAT,
  selection?: Selection,
  warn?: (message: string) => void,
  /** The answer's shared graph of its parents' own data (see `namedReader`), if it has one. */
  shared?: SharedRead,
  /** Its place in the retry's answer (read-places.ts), where the retry's call tells it. */
  place?: Place,
): unknown {
  if (wire === null || wire === undefined) return null;
  if (graphql.isNonNullType(type)) {
    return fromWire(graphql, schema, type.ofType, wire, format, selection, warn, shared, place);
  }
  if (graphql.isListType(type)) {
    return Array.isArray(wire)
      ? wire.map((item, index) =>
          fromWire(
            graphql,
            schema,
            type.ofType,
            item,
            format,
            selection,
            warn,
            shared,
            place && [...place, index],
          ),
        )
      : wire;
  }
  if (graphql.isLeafType(type)) return leafValue(type, wire);
  const concrete = graphql.isObjectType(type) ? type : typeOf(graphql, schema, wire);
  if (!concrete || typeof wire !== 'object' || Array.isArray(wire)) return wire;
  const stored = wire as Record<string, unknown>;
  /** Whether the resolver's object had a `__typename` of its own (the app's tag, kept). */
  let ownTypename = false;
  const member = (value: object) => {
    if (!graphql.isObjectType(type)) answerAsMember(type, value, concrete.name, ownTypename);
    return value;
  };
  const fields = concrete.getFields();
  const typed = format >= 2;
  const value = ((typed ? namedPlain(concrete.name, stored[INSTANCE]) : undefined) ??
    unnamedPlain(typed ? stored[INSTANCE] : undefined)) as Record<string, unknown>;
  /** The selected fields the first call's object did not have: left off (absent-fields.ts). */
  const absent = absentOnReplay(typed ? stored[ABSENT] : undefined);
  const selected = selection ? selectedFields(graphql, schema, concrete, selection) : undefined;
  /** Where Nest reads the field (its class property), beside its schema name. */
  const renamed = (name: string) => {
    const property = nestField(concrete.name, name)?.property;
    return property !== undefined && property !== name ? property : undefined;
  };
  /**
   * Where Nest reads the field, and where a replay writes it: its class property (a renamed
   * field's), never its schema name when renamed (adversary 100: another field's property).
   */
  const placeOf = (name: string) => renamed(name) ?? name;
  /** The places the stored fields were written to. */
  const fromFields = new Set<string>();
  for (const [name, item] of Object.entries(stored)) {
    if (typed && LIBRARY_MEMBERS.has(name)) continue;
    if (!(name in fields) || absent.has(name)) continue;
    // The app's resolver of a renamed field reads its property as its input (its `KEPT`
    // data), never its own answer (adversary 101: `price` over `priceCents`).
    if (renamed(name) !== undefined && fieldResolution(concrete, name) === 'app') continue;
    const nodes = selected?.get(name);
    const field = fromWire(
      graphql,
      schema,
      fields[name].type,
      item,
      format,
      selection && { ...selection, nodes: nodes ?? [] },
      warn,
      shared,
      place && nodes && fieldPlace(place, nodes),
    );
    own(value, placeOf(name), field);
    fromFields.add(placeOf(name));
  }
  // A record stored before `KEPT` (format 1): its data that is no field beside its fields,
  // written where no field is.
  for (const [name, item] of Object.entries(stored)) {
    if ((typed && LIBRARY_MEMBERS.has(name)) || name in fields) continue;
    if (writesBesideFields(name, item, fromFields)) own(value, name, item);
  }
  if (typed) {
    // What the app's resolvers read of it that the answer does not hold (see `PARENT`): data a
    // replay may do without, so a class this process cannot tell (two classes of one name)
    // leaves that object plain, said in the log, never an error for the answer (adversary 96).
    // Never over a field's stored value (a record stored before round 99 kept a renamed
    // field's raw data beside it: see `writesBesideFields`).
    const parentData = namedByTree(
      restoreData(stored[PARENT], shared, (name) =>
        warn?.(unnamedParentMessage(concrete.name, name)),
      ),
      stored[PARENT_CLASSES],
      (name) => warn?.(unnamedParentMessage(concrete.name, name)),
    ) as Record<string, unknown>;
    for (const [name, item] of Object.entries(parentData)) {
      if (writesBesideFields(name, item, fromFields)) own(value, name, item);
      // A selected list kept itself (the graph holds it at another place too: list-members.ts
      // `keepsListItself`) is the list answered, its items the answer's; else its own members
      // that are no items, holes and kind: the list rebuilt from the answer made the app's
      // collection again (list-shapes.ts).
      else if (hasOwn(value, name) && adoptsList(value[name], item)) keptList(value, name, item);
      else if (hasOwn(value, name)) shapeOwn(value, name, item);
    }
    // Its members under registered symbols (`Symbol.for`): no field's, kept as they were; and
    // its own data that is not enumerable (hidden-members.ts), not enumerable again.
    for (const key of Reflect.ownKeys(parentData)) {
      const descriptor = Reflect.getOwnPropertyDescriptor(parentData, key)!;
      if (typeof key === 'symbol' && descriptor.enumerable) {
        defineOwnSymbol(value, key, descriptor.value);
        continue;
      }
      if (descriptor.enumerable || !('value' in descriptor)) continue;
      if (typeof key === 'string' && !writesBesideFields(key, descriptor.value, fromFields)) {
        continue;
      }
      Object.defineProperty(value, key, { ...descriptor, configurable: true });
    }
    const keptData = namedByTree(restoreData(stored[KEPT], shared), stored[KEPT_CLASSES]) as Record<
      string,
      unknown
    >;
    ownTypename = '__typename' in keptData;
    for (const [name, item] of Object.entries(keptData)) {
      // A field's value its wire form changes (an `ID` that was a number), or the input of the
      // app's field of that name, kept by its schema name: where Nest reads it (a renamed
      // field's property), as the first call read it. Own data under a renamed field's schema
      // name is never kept here, but in `PARENT` (see `besideFieldsMember`).
      if (name in fields) own(value, placeOf(name), item);
      else if (writesBesideFields(name, item, fromFields)) own(value, name, item);
    }
  }
  const leafClasses = stored[LEAF_CLASS];
  if (typed && typeof leafClasses === 'object' && leafClasses !== null) {
    for (const [name, tree] of Object.entries(leafClasses as Record<string, unknown>)) {
      const place = placeOf(name);
      const item = value[place];
      if (typeof item !== 'object' || item === null || !hasOwn(value, place)) continue;
      own(value, place, namedByTree(item, tree));
    }
  }
  // Its own keys in the first call's order, where stored (a record without it: as rebuilt).
  if (typed) reorderOwnKeys(value, stored[KEYS]);
  /** What its class's getters gave beyond its fields (`GOTTEN`), by name. */
  let gotten: Record<string, unknown> = {};
  if (typed) {
    gotten = namedByTree(restoreData(stored[GOTTEN]), stored[GOTTEN_CLASSES]) as Record<
      string,
      unknown
    >;
    for (const [name, item] of Object.entries(gotten)) {
      if (hasOwn(value, name)) continue;
      Object.defineProperty(value, name, {
        value: item,
        enumerable: false,
        writable: true,
        configurable: true,
      });
    }
  }
  const fromClass = stored[FROM_CLASS];
  if (typed && Array.isArray(fromClass)) {
    for (const name of fromClass as string[]) {
      const place = placeOf(name);
      if (hasOwn(value, place)) Object.defineProperty(value, place, { enumerable: false });
    }
  }
  const failures = stored[FAILED];
  if (typed && typeof failures === 'object' && failures !== null) {
    for (const [name, failure] of Object.entries(failures as Record<string, FieldError>)) {
      // Only where the retry reads it: a rejected Promise nobody awaits (an outer serializer
      // wraps every own one) would be an unhandled rejection.
      if (selected && !selected.has(name)) continue;
      Object.defineProperty(value, placeOf(name), failedField(failure, graphql));
    }
  }
  // Stored by its selection (format 3): a field the first answer did not select has no value,
  // and a retry that selects it is told so rather than given a null (see not-stored-field.ts).
  // A field the app computes runs again, and reads none of it; one behind field middleware is
  // answered its stored output. Only where the retry selects
  // it, when its selection is known: a layer outside the library that reads every field its
  // class exposes (`ClassSerializerInterceptor`) reads the others too, and finds nothing.
  if (format >= 3) {
    for (const name of selected ? selected.keys() : Object.keys(fields)) {
      if (!(name in fields) || hasOwn(value, placeOf(name)) || absent.has(name)) continue;
      // Computed again (the app's), or answered from the stored output (field middleware:
      // middleware-outputs.ts): nothing is read of the parent.
      const resolution = fieldResolution(concrete, name);
      if (resolution === 'app' || resolution === 'middleware') continue;
      const get = () => {
        throw notStoredField(graphql, concrete.name, name);
      };
      // Told from a stored read where one object is adopted at several places (`ontoNodeAgain`).
      NOT_STORED.add(get);
      Object.defineProperty(value, placeOf(name), { get, configurable: true });
    }
  }
  if (typed) {
    const promisedFields = stored[PROMISED];
    if (Array.isArray(promisedFields)) {
      for (const name of promisedFields as string[]) {
        const place = placeOf(name);
        if (!hasOwn(value, place)) continue;
        const descriptor = Object.getOwnPropertyDescriptor(value, place)!;
        if (!('value' in descriptor)) continue;
        Object.defineProperty(value, place, {
          ...descriptor,
          value: Promise.resolve(descriptor.value),
        });
      }
    }
    // A record stored before ACCESSORS: its FROM_CLASS fields were its class's getters' (or
    // its own data that is not enumerable, which a copy of its own keys leaves out either way).
    const accessorFields = Array.isArray(stored[ACCESSORS])
      ? (stored[ACCESSORS] as string[])
      : Array.isArray(fromClass)
        ? (fromClass as string[])
        : [];
    const getters = [...accessorFields.map(placeOf), ...Object.keys(gotten)];
    throughGetters(value, getters);
  }
  // Its own object where its data reaches back to it (`line.order.lines[i]`): that object,
  // named by its `PARENT` (kept, or left out for `maxResponseBytes` while another parent's
  // data still reaches that object: adversary 109), or by its `KEPT` (an entity's data).
  const node = typed
    ? shared?.adopt?.(
        parentRefSource(stored[PARENT]) ??
          leftOutSource(stored[PARENT]) ??
          parentRefSource(stored[KEPT]),
      )
    : undefined;
  /** The object GraphQL reads at this place, given its aliases' own reads there. */
  const answered = (made: object) => {
    if (typed && place) aliasReadsAgain(graphql, schema, concrete, stored, selected, made, place);
    return made;
  };
  if (!node) return answered(member(value));
  // One object at several places (an order's `primary` line, also `lines[0]`) is the one
  // node at each: the first place makes the node its object; each later one gives it what
  // it lacks, and answers at its place what it read otherwise (adversary 110: the last
  // place's object replaced the first's, its getters too).
  const places = ADOPTED.get(node);
  if (!places) {
    ADOPTED.set(node, place ? [place] : []);
    return answered(member(ontoNode(value, node)));
  }
  const again = member(ontoNodeAgain(value, node, place, places));
  if (place) places.push(place);
  return answered(again);
}

/**
 * The stored reads of a getter field under its later aliases (`ALIASED`), each answered by
 * `made` (the object a replay gives at `place`) to its response key where the retry selects
 * the field (placed-reads.ts): its wire form read back as the field's stored value is, a
 * Promise again where the first answer's was one (`PROMISED`), a failure thrown again when
 * read (never before: a rejection nobody awaits would go unhandled).
 */
function aliasReadsAgain(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
  type: GraphQLObjectType,
  stored: Readonly<Record<string, unknown>>,
  selected: ReadonlyMap<string, unknown> | undefined,
  made: object,
  place: Place,
): void {
  const aliased = stored[ALIASED];
  if (typeof aliased !== 'object' || aliased === null) return;
  const fields = type.getFields();
  const promised = Array.isArray(stored[PROMISED]) ? (stored[PROMISED] as unknown[]) : [];
  for (const [name, byKey] of Object.entries(aliased as Record<string, unknown>)) {
    if (!(name in fields) || (selected && !selected.has(name))) continue;
    if (typeof byKey !== 'object' || byKey === null) continue;
    const property = nestField(type.name, name)?.property ?? name;
    const entries = Object.entries(byKey as Record<string, { v?: unknown; e?: FieldError }>);
    for (const [key, read] of entries) {
      const again = () => {
        if (read.e) return descriptorRead(failedField(read.e, graphql), made);
        const value = fromWire(graphql, schema, fields[name].type, jsonCopy(read.v));
        return promised.includes(name) ? Promise.resolve(value) : value;
      };
      notePlacedRead(made, place, property, again, key);
    }
  }
}

/**
 * The kept array `node` made the list `value[name]` answers (list-members.ts `adoptsList`): each
 * item the answer's, made the node the array held there where it is one (an object several
 * places of the kept data name, `lines.primary`: one node, as one object at the first call);
 * its own members as kept.
 */
function keptList(value: Record<string, unknown>, name: string, node: unknown[]): void {
  const list = keptArray(value[name] as unknown[], node);
  const descriptor = Object.getOwnPropertyDescriptor(value, name)!;
  Object.defineProperty(value, name, { ...descriptor, value: list });
}

/** The kept array `node` made the list `rebuilt` is: each place by kept-items.ts `keptItem`. */
function keptArray(rebuilt: readonly unknown[], node: unknown[]): unknown[] {
  rebuilt.forEach((item, index) => {
    // A hole of the kept array is the app's (the answer's `null` there): a hole again, which
    // a resolver's `reduce` skips as at the first call (adversary 115).
    if (!Object.prototype.hasOwnProperty.call(node, index)) return;
    node[index] = oneItem(item, node[index]);
  });
  return node;
}

/** The item a kept list holds at one place (kept-items.ts `keptItem`, at any depth of lists). */
function oneItem(built: unknown, kept: unknown): unknown {
  // Made a node already (its `__parent` named one): that object, as the answer's place has it.
  if (typeof built === 'object' && built !== null && ADOPTED.has(built)) return built;
  switch (keptItem(built, kept, typeof kept === 'object' && kept !== null && ADOPTED.has(kept))) {
    case 'kept':
      return kept;
    case 'list':
      return keptArray(built as unknown[], kept as unknown[]);
    case 'node':
      ADOPTED.set(kept as object, []);
      return ontoNode(built as object, kept as object);
    default:
      return built;
  }
}

/** `value[name]`, a list rebuilt from the answer, made of the kept `shape` (list-shapes.ts). */
function shapeOwn(value: Record<string, unknown>, name: string, shape: unknown): void {
  const rebuilt = value[name];
  const shaped = shapedList(rebuilt, shape);
  if (shaped === rebuilt) return;
  const descriptor = Object.getOwnPropertyDescriptor(value, name)!;
  Object.defineProperty(value, name, { ...descriptor, value: shaped });
}

/** Each node a replay made an object of (`fromWire`), with the places adopted at so far. */
const ADOPTED = new WeakMap<object, Place[]>();

/** The getters of a field the first answer did not store at a place (`fromWire`). */
const NOT_STORED = new WeakSet<object>();

/**
 * `built` (a later place's object) given to `node`, the object earlier places (`places`) made
 * of it: what it holds (its own members, its getters: `throughGetters`) against what the node
 * answers for each, its own member or its getters' prototype's, whichever holds it (adversary
 * 111: against the node's own alone, a later place's failed or not-stored read shadowed the
 * first's stored one). One the node lacks is the node's from then on (a getter selected at
 * this place only); one the node answers otherwise is answered at this place only
 * (placed-reads.ts), the node keeping the first place's, as the first call's one Proxy keeps
 * its first read (`givenAgain`); but a stored one where the node answers "not stored" is the
 * node's, each earlier place keeping its "not stored" (read-places.ts `laterHeld`).
 */
function ontoNodeAgain(
  built: object,
  node: object,
  place: Place | undefined,
  places: readonly Place[],
): object {
  const getters = Object.getPrototypeOf(built) as object | null;
  const hasGetters = getters !== null && GETTER_PROTOTYPES.has(getters);
  let current = Object.getPrototypeOf(node) as object | null;
  if (hasGetters && (current === null || !GETTER_PROTOTYPES.has(current))) {
    // The first place read no getter of it: a getter prototype of its own, over this place's
    // class, given this place's getters below as any other's.
    current = Object.create(Object.getPrototypeOf(getters) as object | null) as object;
    GETTER_PROTOTYPES.add(current);
    Object.setPrototypeOf(node, current);
  }
  const nodeGetters = current !== null && GETTER_PROTOTYPES.has(current) ? current : undefined;
  // Told apart by what they hold, never read here: a getter may throw (a field that failed,
  // or that the first call did not store), and is run only where GraphQL reads it.
  const held = (descriptor: PropertyDescriptor) => ({
    value: 'value' in descriptor ? descriptor.value : descriptor.get,
    stored: !(descriptor.get && NOT_STORED.has(descriptor.get)),
  });
  const again = (key: string | symbol, descriptor: PropertyDescriptor, holder: object) => {
    const earlierHolder = Reflect.getOwnPropertyDescriptor(node, key)
      ? node
      : nodeGetters && Reflect.getOwnPropertyDescriptor(nodeGetters, key)
        ? nodeGetters
        : undefined;
    const earlier = earlierHolder && Reflect.getOwnPropertyDescriptor(earlierHolder, key)!;
    const read = laterHeld(earlier && held(earlier), held(descriptor));
    if (read === 'add') Object.defineProperty(holder, key, descriptor);
    else if (read === 'placed' && place) {
      notePlacedRead(node, place, key, () => descriptorRead(descriptor, node));
    } else if (read === 'replace') {
      for (const before of places) {
        if (hasPlacedRead(node, before, key)) continue;
        notePlacedRead(node, before, key, () => descriptorRead(earlier!, node));
      }
      Reflect.deleteProperty(earlierHolder!, key);
      Object.defineProperty(holder, key, descriptor);
    }
  };
  for (const key of Reflect.ownKeys(built)) {
    again(key, Reflect.getOwnPropertyDescriptor(built, key)!, node);
  }
  if (!hasGetters || !nodeGetters) return node;
  for (const key of Reflect.ownKeys(getters)) {
    again(key, Reflect.getOwnPropertyDescriptor(getters, key)!, nodeGetters);
  }
  return node;
}

/** What reading a property so defined gives, on `node` (a getter run on it). */
function descriptorRead(descriptor: PropertyDescriptor, node: object): unknown {
  return 'value' in descriptor ? descriptor.value : descriptor.get?.call(node);
}

/**
 * Moves the replay's fields that the first answer gave through getters (`ACCESSORS`,
 * `GOTTEN`) onto getters of a prototype of the replay's own, between it and its prototype:
 * as on an instance of the class, they are no own keys (a serializer's copy of own data
 * leaves them out, `JSON.stringify` too), and a copy that keeps the prototype reads them
 * (adversary 66: Apollo's `cloneObject`). A write to one makes it the object's own data.
 */
/** The prototypes `throughGetters` made (a node adopted at several places: `ontoNodeAgain`). */
const GETTER_PROTOTYPES = new WeakSet<object>();

function throughGetters(value: object, names: readonly (string | undefined)[]): void {
  const moved = names.filter(
    (name): name is string =>
      name !== undefined &&
      hasOwn(value, name) &&
      'value' in Object.getOwnPropertyDescriptor(value, name)!,
  );
  if (moved.length === 0) return;
  const prototype = Object.create(Object.getPrototypeOf(value) as object | null) as object;
  GETTER_PROTOTYPES.add(prototype);
  for (const name of new Set(moved)) {
    const item: unknown = (value as Record<string, unknown>)[name];
    delete (value as Record<string, unknown>)[name];
    Object.defineProperty(prototype, name, {
      get: () => item,
      set(this: object, written: unknown) {
        own(this, name, written);
      },
      configurable: true,
    });
  }
  Object.setPrototypeOf(value, prototype);
}

/**
 * A field whose reading failed at the first answer, as it failed: a Promise that rejects with
 * its error (made when read), an own enumerable property as the
 * resolver's was, which an outer layer copying the value passes on for GraphQL to await; or a
 * getter that throws, not enumerable, as a class's getter is not an own key (a serializer
 * that copies own keys does not read it; GraphQL does).
 */
function failedField(failure: FieldError, graphql: GraphqlModule): PropertyDescriptor {
  if (failure.rejected) {
    let promise: Promise<never> | undefined;
    const rejecting = () => {
      const made = Promise.reject(thrownError(failure, graphql));
      // Its awaiters get the error; one that only reads it (a logger) leaves nothing unhandled.
      made.catch(() => undefined);
      return made;
    };
    return {
      get: () => (promise ??= rejecting()),
      enumerable: true,
      configurable: true,
    };
  }
  return {
    get: () => {
      throw thrownError(failure, graphql);
    },
    configurable: true,
  };
}

/** Sets the object's own data property, past any setter or getter of its class. */
const own = defineOwn;

/** A plain object's member, defined as data (see `strictJson`): its name may be `__proto__`. */
const ownMember = defineOwn;

function hasOwn(value: object, name: string): boolean {
  return Object.prototype.hasOwnProperty.call(value, name);
}

/**
 * The field's arguments in their wire form, for the fingerprint: each through its type's
 * `serialize()` (a `Date` as its string, an enum as its name), and every value checked to be
 * JSON, typed or not.
 *
 * @throws NotJsonArgumentError for a value with no JSON form (an upload, a stream, a Promise,
 *   a Buffer, an instance of a class)
 * @throws ArgumentValueInvalidError for a value its scalar refuses (an Invalid Date)
 */
export function argumentsWire(
  graphql: GraphqlModule | undefined,
  types: Readonly<Record<string, GraphQLInputType>> | undefined,
  args: Readonly<Record<string, unknown>>,
): Record<string, unknown> {
  const wire: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(args)) {
    const type = types?.[name];
    wire[name] = graphql && type ? inputWire(graphql, type, value, name) : strictJson(value, name);
  }
  return wire;
}

function inputWire(
  graphql: GraphqlModule,
  type: GraphQLInputType,
  value: unknown,
  path: string,
): unknown {
  if (value === null || value === undefined) return null;
  if (graphql.isNonNullType(type)) return inputWire(graphql, type.ofType, value, path);
  if (graphql.isListType(type)) {
    return listOf(value).map((item, i) => inputWire(graphql, type.ofType, item, `${path}[${i}]`));
  }
  if (graphql.isLeafType(type)) {
    let serialized: unknown;
    try {
      serialized = type.serialize(value);
    } catch (error) {
      // A date, a string, a number the scalar refuses: the client's value is wrong for the
      // type (an Invalid Date that the scalar's parseValue() let through, say).
      if (isOfJsonKind(value)) {
        const why = error instanceof Error ? error.message : String(error);
        throw new ArgumentValueInvalidError(path, type.name, why);
      }
      // An `Upload` scalar's serialize() throws: it has no wire form.
      throw new NotJsonArgumentError(
        path,
        `${describe(value)} that the scalar ${type.name} cannot write`,
      );
    }
    return strictJson(leafWire(serialized), path);
  }
  if (typeof value !== 'object' || Array.isArray(value)) return strictJson(value, path);
  const fields = type.getFields();
  const wire: Record<string, unknown> = {};
  for (const [name, item] of Object.entries(value)) {
    wire[name] =
      name in fields
        ? inputWire(graphql, fields[name].type, item, `${path}.${name}`)
        : strictJson(item, `${path}.${name}`);
  }
  return wire;
}

/**
 * The value when it is JSON (what `JSON.stringify` writes and reads back the same): null,
 * a string, a boolean, a finite number, an array or a plain object of them.
 *
 * @throws NotJsonArgumentError otherwise
 */
export function strictJson(value: unknown, path: string): unknown {
  if (value === null || typeof value === 'string' || typeof value === 'boolean') return value;
  if (typeof value === 'number') {
    if (Number.isFinite(value)) return value;
    throw new NotJsonArgumentError(path, String(value));
  }
  if (Array.isArray(value)) return value.map((item, i) => strictJson(item, `${path}[${i}]`));
  if (typeof value === 'object') {
    const prototype = Object.getPrototypeOf(value) as unknown;
    // GraphQL's coerced input objects have no prototype; a parsed JSON value has Object's.
    if (prototype !== null && prototype !== Object.prototype) {
      throw new NotJsonArgumentError(path, describe(value));
    }
    const copy: Record<string, unknown> = {};
    for (const [name, item] of Object.entries(value)) {
      // Left out by JSON too, as an absent member.
      // Defined, not assigned: a member named `__proto__` (JSON's and GraphQL's own data)
      // would set the copy's prototype, and drop out of the fingerprint (adversary 69).
      if (item !== undefined) ownMember(copy, name, strictJson(item, `${path}.${name}`));
    }
    return copy;
  }
  throw new NotJsonArgumentError(path, describe(value));
}

/** A value a client can send: a `Date` (what a date scalar parses into) or JSON's own kinds. */
function isOfJsonKind(value: unknown): boolean {
  if (value instanceof Date || Array.isArray(value)) return true;
  if (typeof value !== 'object' || value === null) {
    return typeof value !== 'function' && typeof value !== 'symbol' && typeof value !== 'bigint';
  }
  const prototype = Object.getPrototypeOf(value) as unknown;
  return prototype === null || prototype === Object.prototype;
}

function describe(value: unknown): string {
  if (value === undefined) return 'undefined';
  if (typeof value === 'bigint') return 'a BigInt';
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'symbol') return 'a symbol';
  if (value instanceof Promise) return 'a Promise (an upload, say)';
  if (typeof (value as { pipe?: unknown }).pipe === 'function') return 'a stream';
  if (Buffer.isBuffer(value)) return 'a Buffer';
  const name = (value as { constructor?: { name?: unknown } }).constructor?.name;
  return typeof name === 'string' && name ? `an instance of ${name}` : 'an object with a prototype';
}

/**
 * A scalar's wire value as GraphQL's JSON writes it: a `BigInt` (what BigInt scalars serialize
 * to) as its digits; a value with a `toJSON()` (graphql-scalars' `DateTime` serializes to the
 * `Date` itself) through it, as `JSON.stringify` writes the answer (adversary 74). What is
 * left is checked as JSON by the caller: an upload, a stream, a `Buffer` or a class instance
 * without a `toJSON()` is still refused.
 */
export function leafWire(serialized: unknown): unknown {
  if (typeof serialized === 'bigint') return serialized.toString();
  if (hasToJson(serialized)) return jsonCopy(serialized);
  return serialized;
}

/** A value JSON writes through its `toJSON()`; a `Buffer` aside, refused as documented. */
function hasToJson(value: unknown): boolean {
  return (
    typeof value === 'object' &&
    value !== null &&
    !Buffer.isBuffer(value) &&
    typeof (value as { toJSON?: unknown }).toJSON === 'function'
  );
}

/**
 * A stored scalar as the resolver's value again. A scalar whose `parseValue()` refuses its
 * own wire form is given the wire form, as before.
 */
function leafValue(type: GraphQLLeafType, wire: unknown): unknown {
  try {
    const value = type.parseValue(wire);
    return value === undefined ? wire : value;
  } catch {
    return wire;
  }
}

/** The concrete type of a value of an interface or a union, when it says (`__typename`). */
function typeOf(
  graphql: GraphqlModule,
  schema: GraphQLSchema | undefined,
  value: unknown,
): GraphQLObjectType | undefined {
  const name = (value as { __typename?: unknown } | null)?.__typename;
  const type = typeof name === 'string' ? schema?.getType(name) : undefined;
  return type && graphql.isObjectType(type) ? type : undefined;
}

/**
 * A list's items, its iterable read once (GraphQL takes any iterable for a list; a generator
 * or a `Map`'s `values()` is read to its end), and read once only where the value reaches it
 * twice.
 */
function materialized(walk: Walk, value: unknown): unknown[] {
  if (Array.isArray(value) || typeof value !== 'object' || value === null) return listOf(value);
  const failed = walk.failedLists.get(value);
  if (failed) throw failed.error;
  let items = walk.lists.get(value);
  if (!items) {
    try {
      items = listOf(value);
    } catch (error) {
      // Read once: a later read would find it spent, and answer its items short (see above).
      walk.failedLists.set(value, { error });
      throw error;
    }
    walk.lists.set(value, items);
  }
  return items;
}

function listOf(value: unknown): unknown[] {
  if (Array.isArray(value)) return value;
  if (typeof value === 'object' && value !== null && Symbol.iterator in value) {
    return Array.from(value as Iterable<unknown>);
  }
  return [value];
}

/** A value as JSON writes and reads it (its own data; a `toJSON()` used). */
function jsonCopy(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value) ?? 'null') as unknown;
}
