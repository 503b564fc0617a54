import { fieldError, type FieldError, type StoredFieldError } from './field-answer.js';
import { errorLocations } from './error-location.js';
import { type NullPlace, nullKeyOf, unansweredNulls } from './unanswered-nulls.js';

/**
 * Where the outputs of field middleware on an `@Idempotent()` mutation's answer are, by the
 * operation's GraphQL context and the field's path (as `markReplayed` notes a replay), never
 * by a mark on the value: an outer serializer's copy (`ClassSerializerInterceptor`) drops one.
 *
 * - At the first answer, the middleware runs as it always does; its fields' paths (and the
 *   member a union's `resolveType()` told under them) are noted, and the operation's answer
 *   hook stores each output as the answer holds it (middleware-outputs.ts).
 * - On a replay, each such field answers its stored output, and the middleware never runs.
 */

/** A path in the operation's answer: response keys and list indexes. */
export type AnswerPath = readonly (string | number)[];

/** The outputs stored with a mutation's answer, by their path under the mutation's field. */
export interface StoredOutputs {
  /** Each middleware field's output as the answer held it, by `relativeKey`. */
  outputs: Record<string, unknown>;
  /** The member of a union or interface each object under them was, by `relativeKey`. */
  members?: Record<string, string>;
  /**
   * The errors at or under each middleware field's output at the first answer (where the
   * answer holds null), by their own path's `relativeKey`: a replay answers each again, there.
   */
  errors?: Record<string, StoredFieldError>;
  /**
   * Each output's key by its named key (field names and arguments: see named-path.ts): a
   * retry that selects a field under another alias answers the first's output of it.
   */
  names?: Record<string, string>;
  /**
   * The named key of each output (and field inside one) that `names` does not point to: a
   * field selected under several aliases (`a: shipping { street } b: shipping { city }`), whose
   * aliases after the first hold outputs of their own (what each selected), by key.
   */
  told?: Record<string, string>;
  /**
   * The middleware fields that ran at the first answer but have no value in it, an ancestor
   * nulled by an error that is not theirs (a sibling's, another item's): the key of that error
   * (stored in `errors`), by the field's `relativeKey`. A replay throws that error again at its
   * own place, which nulls the same ancestor, never `field_not_stored`.
   */
  nulled?: Record<string, string>;
  /**
   * The middleware fields GraphQL completed but the answer's `data` lost (a null above the
   * mutation's field: another root field's error) whose output could not be made again (see
   * `RemadeOutput`), by `relativeKey`: a replay answers `field_output_pending` there (its
   * work done once; read it with a query), never `field_not_stored` (adversary 83).
   */
  lost?: string[];
  /**
   * The own data of each object inside an output whose field the app resolves (a
   * `@ResolveField()` reading its parent's columns), as typed JSON (kept-data.ts), by
   * `relativeKey`: a replay's rebuilt parent holds it again, so that the resolver, which runs
   * again, reads what it read at the first answer (adversary 81), not only the answer's fields.
   * Each is a node of `outputsGraph` (`{ p }`); in a record stored before it, its own graph.
   */
  parents?: Record<string, unknown>;
  /**
   * The data of all the `parents`, one typed graph (app-parents.ts): an object several of them
   * reach (each `line.order`) is written once (adversary 107).
   */
  outputsGraph?: unknown;
}

export type { StoredFieldError };

/** An error as the answer hook sees it: graphql-js's, located by its `path`. */
export interface AnsweredError {
  message?: unknown;
  path?: readonly (string | number)[];
  locations?: unknown;
  extensions?: unknown;
  /** What was thrown, when the error is graphql-js's wrapping of it. */
  originalError?: unknown;
}

/** A mutation's first answer, its middleware outputs to be stored at the operation's answer. */
interface FirstAnswer {
  root: AnswerPath;
  /** The middleware fields' paths that ran under it. */
  paths: AnswerPath[];
  /** Their named keys (see `StoredOutputs.names`), by `relativeKey`. */
  named: Record<string, string>;
  members: Record<string, string>;
  complete: (outputs: StoredOutputs) => Promise<void>;
  /** Its key (`idOf`), for a replay of it in the same operation (see `ReplayedOutputs`). */
  id?: string;
  /** What each middleware field's resolver gave (its middleware's result), by `relativeKey`. */
  results: Map<string, unknown>;
  /** The named keys inside each output, read from it at the hook (see `InsideNames`). */
  inside: Map<string, InsideNames>;
  /** Each output made again from its middleware's result (see `RemadeOutput`), by key. */
  remade: Map<string, RemadeOutput>;
  /**
   * The own data of the parents of app-resolved fields in its outputs, by key, as noted
   * (app-parents.ts `notedParent`: written into one graph as each is noted, stored with the
   * answer).
   */
  parents: Record<string, unknown>;
  /** Where GraphQL put the null for an error at a path (see `NulledAt`), once one is told. */
  nulledAt?: NulledAt;
}

/**
 * Where graphql-js put the null for an error at `path` (response keys and indexes from the
 * operation's root): the length of its prefix at the nearest nullable place at or above it
 * (nulled-place.ts); `memberAt` tells the member noted at a key (from the operation's root).
 * Undefined where it cannot be told.
 */
export type NulledAt = (
  path: AnswerPath,
  memberAt: (key: string) => string | undefined,
) => number | undefined;

/**
 * A middleware field's output as GraphQL completed it, made again from its middleware's
 * result (see completed-output.ts), where the answer's `data` lost it; `memberAt` as for
 * `InsideNames`. Undefined where it cannot be made so; a Promise of it where a Promise is
 * under the output (awaited at the answer hook; in the same operation, not made).
 */
export type RemadeOutput = (
  result: unknown,
  memberAt: (key: string) => string | undefined,
  resultAt?: (key: string) => { value: unknown } | undefined,
) => Remade | Promise<Remade>;

/**
 * The result the wrapper of a middleware field under the output at `key` gave GraphQL at the
 * first call (`noteFirstResult`), by its key under that output: what GraphQL completed there
 * (adversary 89: an inner middleware field made the whole output lost).
 */
function resultsUnder(first: FirstAnswer, key: string) {
  return (under: string): { value: unknown } | undefined => {
    const at = under === '' ? key : `${key}.${under}`;
    return first.results.has(at) ? { value: first.results.get(at) } : undefined;
  };
}

/** See `RemadeOutput`: `errorsAt`, where GraphQL answered an error under it (completed-output.ts). */
type Remade = { value: unknown; errorsAt?: readonly string[] } | undefined;

/**
 * The named keys of the fields inside a middleware field's output `value`, by their path under
 * it (output-names.ts); `memberAt` tells the member noted at a path under the field.
 */
export type InsideNames = (
  value: unknown,
  memberAt: (key: string) => string | undefined,
) => Readonly<Record<string, string>>;

/**
 * A replayed mutation's stored outputs, or that they are still pending; or (`operation`) that
 * its first answer is of this same operation (the key twice in one operation), whose outputs
 * are stored only at the operation's answer, after this replay: its middleware fields answer
 * what the first answer's middleware gave, never running again.
 */
export type ReplayedOutputs = { root: AnswerPath } & (
  | { kind: 'stored'; outputs: StoredOutputs }
  | { kind: 'pending' }
  | { kind: 'operation'; id: string }
);

const FIRST = Symbol('idempotency.firstAnswerOutputs');
const REPLAYED = Symbol('idempotency.replayedOutputs');

interface Noted {
  [FIRST]?: FirstAnswer[];
  [REPLAYED]?: ReplayedOutputs[];
}

function noted(context: unknown): Noted | undefined {
  return typeof context === 'object' && context !== null ? (context as Noted) : undefined;
}

/**
 * `path` under `root` as a key (`members.0.name`), or undefined when `root` is not above it.
 * Response keys are GraphQL names, which hold no dot. `strict`: `root` itself is not under it.
 */
export function relativeKey(root: AnswerPath, path: AnswerPath, strict = true): string | undefined {
  if (path.length < root.length || (strict && path.length === root.length)) return undefined;
  for (let i = 0; i < root.length; i++) if (path[i] !== root[i]) return undefined;
  return path.slice(root.length).join('.');
}

/** The value at `path` in an answer's `data`; undefined where there is none. */
export function dataAt(data: unknown, path: AnswerPath): unknown {
  let at: unknown = data;
  for (const step of path) {
    if (typeof at !== 'object' || at === null) return undefined;
    at = (at as Record<string | number, unknown>)[step];
  }
  return at;
}

/** Notes a mutation's first answer, committed with its middleware outputs pending. */
export function awaitOutputs(
  context: unknown,
  root: AnswerPath,
  complete: (outputs: StoredOutputs) => Promise<void>,
  id?: string,
): void {
  const target = noted(context);
  if (!target) return;
  const first: FirstAnswer = {
    root,
    paths: [],
    named: {},
    members: {},
    complete,
    results: new Map(),
    inside: new Map(),
    remade: new Map(),
    parents: {},
  };
  (target[FIRST] ??= []).push(id === undefined ? first : { ...first, id });
}

/**
 * Notes what a middleware field's resolver gave at a first answer (a value, or its Promise),
 * for a replay of its key in the same operation (see `ReplayedOutputs`).
 */
export function noteFirstResult(context: unknown, path: AnswerPath, result: unknown): void {
  for (const first of noted(context)?.[FIRST] ?? []) {
    const key = relativeKey(first.root, path);
    if (key !== undefined) first.results.set(key, result);
  }
}

/**
 * Notes a middleware field that ran at a first answer (its output is stored at the hook), and
 * its named path (`named`, read only under a first answer: see named-path.ts).
 */
export function noteMiddlewarePath(
  context: unknown,
  path: AnswerPath,
  named?: () => readonly string[] | undefined,
  inside?: InsideNames,
  remade?: RemadeOutput,
  nulledAt?: NulledAt,
): void {
  let steps: readonly string[] | undefined;
  for (const first of noted(context)?.[FIRST] ?? []) {
    const key = relativeKey(first.root, path);
    if (key === undefined) continue;
    first.paths.push(path);
    first.nulledAt ??= nulledAt;
    if (remade) first.remade.set(key, remade);
    steps ??= named?.();
    if (steps?.length !== path.length) continue;
    first.named[key] = namedKey(steps, first.root);
    if (inside) first.inside.set(key, inside);
  }
}

/** Adds the named keys inside each output of `first` (see `InsideNames`), read from `data`. */
function nameInside(first: FirstAnswer, data: unknown): void {
  for (const path of first.paths) {
    const key = relativeKey(first.root, path);
    const inside = key === undefined ? undefined : first.inside.get(key);
    const own = key === undefined ? undefined : first.named[key];
    if (key === undefined || !inside || own === undefined) continue;
    try {
      const found = inside(dataAt(data, path), (under) =>
        under === '' ? first.members[key] : first.members[`${key}.${under}`],
      );
      for (const [under, name] of Object.entries(found)) {
        first.named[`${key}.${under}`] ??= `${own}.${name}`;
      }
    } catch {
      // Unnamed: its fields are found by their response keys only.
    }
  }
}

/** A named path's steps under `root`, as a key (see `StoredOutputs.names`). */
export function namedKey(steps: readonly string[], root: AnswerPath): string {
  return steps.slice(root.length).join('.');
}

/**
 * Notes, at a first answer, the parent of a field the app resolves where it is inside a
 * middleware field's output (at `pathOf()`, the parent's own): its own data, as `keep` gives it
 * (undefined: none), once per place (see `StoredOutputs.parents`), at its first such field,
 * before that resolver runs. `keep` is given the record the first answer's parents are noted
 * in, which they are written by (app-parents.ts: one graph per answer, written as each comes).
 */
export function noteAppParent(
  context: unknown,
  pathOf: () => AnswerPath,
  keep: (answer: object) => unknown,
): void {
  const firsts = noted(context)?.[FIRST];
  // Read only under a first answer: the resolvers of every operation pass here.
  if (!firsts?.length) return;
  const path = pathOf();
  for (const first of firsts) {
    const key = relativeKey(first.root, path);
    if (key === undefined || key in first.parents) continue;
    const inside = first.paths.some((output) => {
      const at = relativeKey(first.root, output);
      return at !== undefined && isAtOrUnder(key, at);
    });
    if (!inside) continue;
    const kept = keep(first.parents);
    if (kept !== undefined) first.parents[key] = kept;
  }
}

/** Whether `path` is under a middleware field's output of a first answer of the operation. */
export function insideFirstOutput(context: unknown, path: AnswerPath): boolean {
  const firsts = noted(context)?.[FIRST];
  if (!firsts?.length) return false;
  return firsts.some((first) => {
    const key = relativeKey(first.root, path);
    return (
      key !== undefined &&
      first.paths.some((output) => {
        const at = relativeKey(first.root, output);
        return at !== undefined && at !== key && isAtOrUnder(key, at);
      })
    );
  });
}

/** Notes the member a union's or interface's `resolveType()` told at a first answer. */
export function noteMember(context: unknown, path: AnswerPath, typename: unknown): void {
  const firsts = noted(context)?.[FIRST];
  if (!firsts?.length) return;
  const note = (name: unknown) => {
    const told =
      typeof name === 'string' ? name : (name as { name?: unknown } | null | undefined)?.name;
    if (typeof told !== 'string') return;
    for (const first of firsts) {
      const key = relativeKey(first.root, path);
      if (key !== undefined) first.members[key] = told;
    }
  };
  if (typeof (typename as PromiseLike<unknown> | null)?.then === 'function') {
    void Promise.resolve(typename).then(note, () => undefined);
  } else note(typename);
}

/**
 * What of the answer's `data` a first answer stores: each middleware field's output as the
 * answer holds it (a field the answer has no value at, its parent null, is left out, unless an
 * error at or under it nulled that parent: then it is null with that error), the members told
 * at or under them, and the errors where they hold null.
 */
export function outputsIn(
  data: unknown,
  root: AnswerPath,
  paths: readonly AnswerPath[],
  members: Readonly<Record<string, string>>,
  errors: readonly AnsweredError[] = [],
  named: Readonly<Record<string, string>> = {},
  remade: Readonly<Record<string, unknown>> = {},
  parents: Readonly<Record<string, unknown>> = {},
  nulledAt?: (path: AnswerPath) => number | undefined,
): StoredOutputs {
  const located = errors.flatMap((error) => {
    const key = error.path && relativeKey(root, error.path);
    return key === undefined || typeof error.message !== 'string' ? [] : [{ error, key }];
  });
  const outputs: Record<string, unknown> = {};
  const nulled: Record<string, string> = {};
  const lost: string[] = [];
  const lostAbove = nulledAncestor(data, root) !== undefined;
  for (const path of paths) {
    const value = dataAt(data, path);
    const key = relativeKey(root, path);
    if (key === undefined) continue;
    if (value !== undefined) outputs[key] = value;
    // Not in the answer, its parent null by an error at it (a middleware's null on a non-null
    // field): the error is its answer, which nulls the same parent on a replay.
    else if (located.some((each) => each.key === key)) outputs[key] = null;
    // Completed, but lost from `data` by a null above the mutation's field (another root
    // field's error, or one under it that reached the root): made again from the middleware's
    // result, where that can be sure; GraphQL's own completion answers the same again, an
    // error under it null where GraphQL nulled it (adversary 84: not the whole output).
    else if (Object.prototype.hasOwnProperty.call(remade, key)) outputs[key] = remade[key];
    // An error under it that reached it (its own null, or its parent's).
    else if (located.some((each) => isAtOrUnder(each.key, key))) outputs[key] = null;
    else {
      const by = nullingError(data, root, path, located, nulledAt);
      if (by !== undefined) nulled[key] = by;
      else if (lostAbove && !lost.includes(key)) lost.push(key);
    }
  }
  const keys = Object.keys(outputs);
  const kept: Record<string, string> = {};
  for (const [key, member] of Object.entries(members)) {
    if (keys.some((output) => isAtOrUnder(key, output))) kept[key] = member;
  }
  const ownData: Record<string, unknown> = {};
  for (const [key, data] of Object.entries(parents)) {
    if (keys.some((output) => isAtOrUnder(key, output))) ownData[key] = data;
  }
  // Each error where an output holds null: the field's own (a generator read by GraphQL that
  // throws part-way, a middleware that throws), or under it (a null item of a non-null list
  // type, which nulls the list). Its words as graphql-js gave them, and what was thrown.
  const failed: Record<string, StoredFieldError> = {};
  for (const { error, key } of located) {
    const nulling = Object.values(nulled).includes(key);
    if (key in failed || !(nulling || keys.some((output) => isAtOrUnder(key, output)))) continue;
    const at = dataAt(data, error.path!);
    if (at !== null && at !== undefined) continue;
    // Its locations kept where a replay may make it past its own field: not a middleware
    // field's own, or one inside another's output (thrown by the outer one, whose output the
    // error nulled).
    const deeper =
      nulling ||
      !keys.includes(key) ||
      keys.some((output) => output !== key && isAtOrUnder(key, output));
    failed[key] = storedError(error, error.message as string, deeper);
  }
  // Two aliases of one field with the same arguments: either is its output (the first).
  // The fields inside the outputs too (output-names.ts), each output's own key first.
  const names: Record<string, string> = {};
  const inside = Object.keys(named).filter(
    (key) => !keys.includes(key) && keys.some((output) => isAtOrUnder(key, output)),
  );
  const told: Record<string, string> = {};
  // The nulled fields by their named keys too: a retry under other aliases meets the same
  // error again, never `field_not_stored`.
  for (const key of [...keys, ...inside, ...Object.keys(nulled), ...lost]) {
    const name = named[key];
    if (name === undefined) continue;
    if (!(name in names)) names[name] = key;
    else told[key] = name;
  }
  return {
    outputs,
    ...(Object.keys(kept).length > 0 ? { members: kept } : {}),
    ...(Object.keys(failed).length > 0 ? { errors: failed } : {}),
    ...(Object.keys(names).length > 0 ? { names } : {}),
    ...(Object.keys(told).length > 0 ? { told } : {}),
    ...(Object.keys(nulled).length > 0 ? { nulled } : {}),
    ...(lost.length > 0 ? { lost } : {}),
    ...(Object.keys(ownData).length > 0 ? { parents: ownData } : {}),
  };
}

/**
 * The key of the error that nulled the nearest null ancestor of `path` (under `root`, or
 * `root` itself), where `path` has no value in `data` and no error of its own: the first
 * error at or under that ancestor whose place is null. Undefined where there is none.
 * Where that ancestor is at or above the mutation's field (the whole `data` null), an error
 * under the mutation's field is taken only where the null GraphQL put for it (`nulledAt`) is
 * at or above `path`, where that can be told (adversary 84: a nullable sibling's own error,
 * which nulled only itself, was answered as the output's).
 */
export function nullingError(
  data: unknown,
  root: AnswerPath,
  path: AnswerPath,
  located: readonly { key: string; error: AnsweredError }[],
  nulledAt?: (path: AnswerPath) => number | undefined,
): string | undefined {
  const end = nulledAncestor(data, path);
  if (end === undefined) return undefined;
  // Above the mutation's field (the whole `data`, nulled by a non-null root field): an error
  // under the mutation's field nulled it only where one is there.
  const above = end <= root.length ? '' : relativeKey(root, path.slice(0, end), false)!;
  const reaches = (at: AnswerPath) => {
    if (above !== '' || !nulledAt) return true;
    const nulled = nulledAt(at);
    if (nulled === undefined) return true;
    let shared = 0;
    while (shared < Math.min(at.length, path.length) && at[shared] === path[shared]) shared++;
    return nulled <= shared;
  };
  const found = located.find(
    ({ key, error }) =>
      (above === '' || isAtOrUnder(key, above)) &&
      (dataAt(data, error.path!) ?? null) === null &&
      reaches(error.path!),
  );
  return found?.key;
}

/**
 * How many steps of `path` lead to its nearest ancestor that is null in `data` (0: `data`
 * itself), where `path` has no value; undefined where none is (a field not selected there).
 * graphql-js nulls the nearest nullable ancestor of an error's field, and all under it is
 * gone: that ancestor is the first null met going down.
 */
export function nulledAncestor(data: unknown, path: AnswerPath): number | undefined {
  let at: unknown = data;
  for (let end = 0; end < path.length; end++) {
    if (at === null) return end;
    if (typeof at !== 'object' || at === undefined) return undefined;
    at = (at as Record<string | number, unknown>)[path[end]];
  }
  return undefined;
}

/** A key's path steps again (`tags.1`: `['tags', 1]`): a response key is a name, never digits. */
export function keySteps(key: string): (string | number)[] {
  return key === '' ? [] : key.split('.').map((step) => (/^\d+$/.test(step) ? Number(step) : step));
}

/** Whether `key` is `output`'s, or under it. */
export function isAtOrUnder(key: string, output: string): boolean {
  return key === output || key.startsWith(`${output}.`);
}

/**
 * An answered error as it is stored: under a field (`deeper`), with its locations, which a
 * replay gives it where the field's would be wrong (see `StoredFieldError`).
 */
function storedError(error: AnsweredError, message: string, deeper: boolean): StoredFieldError {
  const stored: StoredFieldError = { message };
  const extensions = plainExtensions(error.extensions);
  if (extensions) stored.extensions = extensions;
  const thrown = thrownOf(error.originalError);
  if (thrown) stored.thrown = thrown;
  const locations = deeper ? errorLocations(error.locations) : undefined;
  if (locations) stored.locations = locations;
  return stored;
}

/** What was thrown, stored as a resolver's error is; none where it cannot be written. */
function thrownOf(original: unknown): FieldError | undefined {
  if (!(original instanceof Error)) return undefined;
  try {
    const thrown = fieldError(original);
    JSON.stringify(thrown);
    return thrown;
  } catch {
    return undefined;
  }
}

/** An error's `extensions` as JSON can keep them (none when empty or not a plain object). */
function plainExtensions(extensions: unknown): Record<string, unknown> | undefined {
  if (typeof extensions !== 'object' || extensions === null) return undefined;
  try {
    const json = JSON.parse(JSON.stringify(extensions)) as Record<string, unknown>;
    return Object.keys(json).length > 0 ? json : undefined;
  } catch {
    return undefined;
  }
}

/**
 * Called by the operation's answer hook with the answer's `data` (Apollo's `singleResult.data`,
 * Mercurius' `execution.data`): stores the outputs of each first answer of the operation.
 * Never throws (each store says its own failure).
 */
export async function storeOutputsOf(
  context: unknown,
  data: unknown,
  errors: readonly AnsweredError[] = [],
): Promise<void> {
  const target = noted(context);
  const firsts = target?.[FIRST];
  if (!target || !firsts?.length) return;
  target[FIRST] = [];
  await Promise.all(
    firsts.map(async (first) => {
      nameInside(first, data);
      const all = [...errors, ...(await thrownUnanswered(first, data, errors))];
      const remade = await remadeOutputs(first, data, all);
      return first
        .complete(
          outputsIn(
            data,
            first.root,
            first.paths,
            first.members,
            all,
            first.named,
            remade,
            first.parents,
            nulledAtOf(first),
          ),
        )
        .catch(() => undefined);
    }),
  );
}

/**
 * The errors the middleware fields of `first` threw where the answer holds them as null with no
 * error entry at or under them (unanswered-nulls.ts: a Mercurius `AggregateError`'s entries
 * have no path), each at its field's path, as graphql-js would have located it.
 */
async function thrownUnanswered(
  first: FirstAnswer,
  data: unknown,
  errors: readonly AnsweredError[],
): Promise<AnsweredError[]> {
  const byKey = new Map<string, AnswerPath>();
  const places: NullPlace[] = [];
  for (const path of first.paths) {
    const key = relativeKey(first.root, path);
    if (key === undefined) continue;
    const value = dataAt(data, path);
    if (value === null) {
      byKey.set(key, path);
      places.push({ key, nulledAt: key });
      continue;
    }
    if (value !== undefined) continue;
    // Left out under a null parent under the mutation's field (a non-null field's null
    // nulls it: adversary 93), or the mutation's field itself (adversary 96); one above it
    // is another story (`remadeOutputs`).
    const nulledAt = nullKeyOf(first.root.length, path, nulledAncestor(data, path));
    if (nulledAt === undefined) continue;
    byKey.set(key, path);
    places.push({ key, nulledAt });
  }
  if (byKey.size === 0) return [];
  const errorKeys = errors.flatMap((error) => {
    const key = error.path && relativeKey(first.root, error.path, false);
    return key === undefined ? [] : [key];
  });
  const found: AnsweredError[] = [];
  for (const key of unansweredNulls(places, errorKeys, isAtOrUnder)) {
    const result = first.results.get(key);
    if (typeof (result as PromiseLike<unknown> | null)?.then !== 'function') continue;
    const thrown = await Promise.resolve(result).then(
      () => undefined,
      (error: unknown) => ({ error }),
    );
    if (!thrown) continue;
    const { error } = thrown;
    const message = error instanceof Error ? error.message : String(error);
    found.push({ message, path: byKey.get(key), originalError: error });
  }
  return found;
}

/** `first`'s `nulledAt` with the members noted under it (see `NulledAt`). */
function nulledAtOf(first: FirstAnswer): ((path: AnswerPath) => number | undefined) | undefined {
  const { nulledAt } = first;
  if (!nulledAt) return undefined;
  return (path) =>
    nulledAt(path, (key) => {
      const under = relativeKey(first.root, keySteps(key));
      return under === undefined ? undefined : first.members[under];
    });
}

/**
 * The outputs of `first` that GraphQL completed but the answer's `data` lost, an ancestor
 * above the mutation's field nulled (another root field's error: see `RemadeOutput`), by key.
 */
async function remadeOutputs(
  first: FirstAnswer,
  data: unknown,
  errors: readonly AnsweredError[],
): Promise<Record<string, unknown>> {
  const remade: Record<string, unknown> = {};
  const lost = nulledAncestor(data, first.root);
  if (lost === undefined) return remade;
  // Where the answer has an error (by key under the mutation's field).
  const answered = new Set(
    errors.map((error) => error.path && relativeKey(first.root, error.path)),
  );
  for (const path of first.paths) {
    const key = relativeKey(first.root, path);
    const remake = key === undefined ? undefined : first.remade.get(key);
    if (key === undefined || !remake || !first.results.has(key)) continue;
    try {
      const made = await remake(
        await first.results.get(key),
        (under) => (under === '' ? first.members[key] : first.members[`${key}.${under}`]),
        resultsUnder(first, key),
      );
      // Made with a null where it failed inside: only where GraphQL answered that error.
      const failed = made?.errorsAt ?? [];
      if (made && failed.every((under) => answered.has(`${key}.${under}`))) {
        remade[key] = made.value;
      }
    } catch {
      // Its middleware's result failed: GraphQL answered an error, which is stored.
    }
  }
  return remade;
}

/** Notes a replayed mutation's stored outputs (or that they are pending) on its operation. */
export function noteReplayedOutputs(context: unknown, replayed: ReplayedOutputs): void {
  const target = noted(context);
  if (!target) return;
  const list = (target[REPLAYED] ??= []);
  // The same field replayed again (an app's retry): its latest answer.
  const same = list.findIndex((entry) => relativeKey(entry.root, replayed.root, false) === '');
  if (same >= 0) list.splice(same, 1);
  list.push(replayed);
}

/** What a middleware field at `path` answers on a replay (see `outputAt`). */
export function replayedOutputAt(
  context: unknown,
  path: AnswerPath,
  named?: () => readonly string[] | undefined,
  viaApp?: (rootLength: number) => boolean,
): OutputAt | undefined {
  const target = noted(context);
  return outputAt(target?.[REPLAYED] ?? [], path, named, target?.[FIRST], viaApp);
}

/**
 * What a middleware field at `path` answers: `stored` (its output, and the key under its
 * mutation, where the members are), `unstored` (the first answer has no output there: it did
 * not select the field, or its parent was null), `pending` (the first answer's outputs never
 * came), or undefined when no replayed mutation is above it (the middleware runs).
 */
export type OutputAt =
  | {
      kind: 'stored';
      wire: unknown;
      key: string;
      members: Readonly<Record<string, string>>;
      /** The stored errors at or under the output (see `StoredOutputs.errors`), by key. */
      errors: Readonly<Record<string, StoredFieldError>>;
      /**
       * The stored named keys (see `StoredOutputs.names`) and the field's own named key: the
       * fields inside its output are found by their names too (`outputValue`).
       */
      names?: Readonly<Record<string, string>>;
      named?: string;
      /** Each stored key's named key (see `StoredOutputs.names` and `told`). */
      told?: Readonly<Record<string, string>>;
      /** The kept own data of app-resolved fields' parents at or under it (`parents`). */
      parents?: Readonly<Record<string, unknown>>;
      /** Their one graph (`StoredOutputs.outputsGraph`), where they are nodes of it. */
      outputsGraph?: unknown;
      /**
       * The first call's other outputs of this very field (its other aliases: `a: shipping
       * { street } b: shipping { city }`), each with its key and the errors at or under it,
       * merged into this one where the retry groups the fields otherwise (adversary 84).
       */
      others?: readonly {
        wire: unknown;
        key: string;
        errors: Readonly<Record<string, StoredFieldError>>;
      }[];
    }
  | { kind: 'unstored' }
  /** No value at the first answer, an ancestor nulled by `error`, at `path` (`nulled`). */
  | { kind: 'nulled'; error: StoredFieldError; path: AnswerPath }
  | { kind: 'pending' }
  /** What the first answer's middleware gave, in this same operation. */
  | {
      kind: 'shared';
      result: unknown;
      /**
       * The first call's output made again from `result` as GraphQL completed it for the
       * first call's selection (see `RemadeOutput`), with its key and the members told under
       * it: answered as a stored output is, so that the second call gets what the first
       * selected and what a replay of the operation will answer. Undefined where it cannot be
       * made so: `result` itself.
       */
      remade?: (result: unknown) => SharedOutput | undefined;
    };

/** The first call's output made again for the key met again (see `OutputAt`'s `shared`). */
export interface SharedOutput {
  wire: unknown;
  key: string;
  members: Readonly<Record<string, string>>;
  /** The named keys at and inside it (see `StoredOutputs.names`). */
  names: Readonly<Record<string, string>>;
  /** The output's own named key. */
  named?: string;
}

export function outputAt(
  replays: readonly ReplayedOutputs[],
  path: AnswerPath,
  named?: () => readonly string[] | undefined,
  firsts: readonly FirstAnswer[] = [],
  viaApp?: (rootLength: number) => boolean,
): OutputAt | undefined {
  for (const replay of replays) {
    let key = relativeKey(replay.root, path);
    if (key === undefined) continue;
    // Under a field the app resolves (read anew on every replay): the middleware runs on its
    // fresh value, as on any query; the stored output is of the first answer's value.
    if (viaApp?.(replay.root.length)) return undefined;
    if (replay.kind === 'pending') return { kind: 'pending' };
    if (replay.kind === 'operation') return sharedAt(firsts, replay, key, path, named);
    const { outputs, members, errors, names, nulled } = replay.outputs;
    const steps = named?.();
    const name = steps?.length === path.length ? namedKey(steps, replay.root) : undefined;
    const has = (at: string) => Object.prototype.hasOwnProperty.call(outputs, at);
    // Read once per stored answer, not per field: under a global field middleware every field
    // of a replay asks here, and a walk of all the keys each time was quadratic (adversary 110).
    const { told, keysNamed } = outputsIndex(replay.outputs);
    const found = storedKeyFor(has, key, name, names, told);
    const at = found === undefined ? nulledKeyFor(nulled ?? {}, key, name, names, told) : undefined;
    const by = at === undefined ? undefined : nulled?.[at];
    if (at !== undefined && by !== undefined && errors?.[by]) {
      return { kind: 'nulled', error: errors[by], path: nullingPath(path, at, by) };
    }
    if (found === undefined) {
      // Completed at the first answer, but not kept (see `StoredOutputs.lost`).
      const gone = replay.outputs.lost ?? [];
      const lostAt = storedKeyFor((each) => gone.includes(each), key, name, names, told);
      return lostAt === undefined ? { kind: 'unstored' } : { kind: 'pending' };
    }
    key = found;
    const errorsUnder = (at: string) => {
      const under: Record<string, StoredFieldError> = {};
      for (const [each, error] of Object.entries(errors ?? {})) {
        if (isAtOrUnder(each, at)) under[each] = error;
      }
      return under;
    };
    const { parents, outputsGraph } = replay.outputs;
    const others =
      name === undefined
        ? []
        : (keysNamed.get(name) ?? [])
            .filter((at) => at !== found)
            .map((at) => ({ wire: outputs[at], key: at, errors: errorsUnder(at) }));
    return {
      kind: 'stored',
      wire: outputs[key],
      key,
      members: members ?? {},
      errors: errorsUnder(key),
      ...(parents ? { parents } : {}),
      ...(parents && outputsGraph !== undefined ? { outputsGraph } : {}),
      ...(names && name !== undefined ? { names, named: name, told } : {}),
      ...(others.length > 0 ? { others } : {}),
    };
  }
  return undefined;
}

/**
 * The key of the nulled field (see `StoredOutputs.nulled`) that answers a replayed field at
 * response key `key` named `name`: by its named key first, then by its response key unless
 * the first answer knew that key as another field (as `storedKeyFor`).
 */
export function nulledKeyFor(
  nulled: Readonly<Record<string, string>>,
  key: string,
  name: string | undefined,
  names: Readonly<Record<string, string>> = {},
  told: Readonly<Record<string, string>> = {},
): string | undefined {
  const has = (at: string) => Object.prototype.hasOwnProperty.call(nulled, at);
  return storedKeyFor(has, key, name, names, told);
}

/**
 * Where the error `by` that nulled the field stored at `at` is thrown again on a replay whose
 * field is at `path`: under the ancestor they share, at the replay's own path of it (the
 * retry may name it under another alias), the error's steps below it as the first answer gave
 * them.
 */
export function nullingPath(path: AnswerPath, at: string, by: string): AnswerPath {
  const own = keySteps(at);
  const error = keySteps(by);
  let shared = 0;
  while (shared < own.length && shared < error.length && own[shared] === error[shared]) shared++;
  const above = path.slice(0, path.length - own.length + shared);
  return [...above, ...error.slice(shared)];
}

/** What `outputsIndex` reads of a stored answer's outputs, once. */
export interface OutputsIndex {
  /** Each stored key's named key (`toldOf`). */
  told: Record<string, string>;
  /** By named key, the output keys told so, in the outputs' order (a field's aliases). */
  keysNamed: Map<string, string[]>;
}

/** Each stored answer's `OutputsIndex`, by its decoded outputs (one object per replay). */
const indexes = new WeakMap<StoredOutputs, OutputsIndex>();

/**
 * The named keys of `stored`'s outputs, read once per decoded answer: every middleware field of
 * a replay looks its output up here (under a global field middleware, every field of it), and
 * reading all the keys again for each was quadratic in the answer (adversary 110: 2,000 lines
 * replayed in 17-24 s).
 */
export function outputsIndex(stored: StoredOutputs): OutputsIndex {
  let index = indexes.get(stored);
  if (index) return index;
  const told = toldOf(stored.names, stored.told);
  const keysNamed = new Map<string, string[]>();
  for (const at of Object.keys(stored.outputs)) {
    const name = told[at];
    if (name === undefined) continue;
    let keys = keysNamed.get(name);
    if (!keys) keysNamed.set(name, (keys = []));
    keys.push(at);
  }
  index = { told, keysNamed };
  indexes.set(stored, index);
  return index;
}

/**
 * Each stored key's named key: read back from `names` (the first key of each), and `told` (the
 * others: see `StoredOutputs.told`), so that a retry of the same aliases answers each its own.
 */
export function toldOf(
  names: Readonly<Record<string, string>> = {},
  told: Readonly<Record<string, string>> = {},
): Record<string, string> {
  const byKey: Record<string, string> = {};
  for (const [name, key] of Object.entries(names)) byKey[key] ??= name;
  return { ...byKey, ...told };
}

/** What a replay in the first answer's own operation answers (see `ReplayedOutputs`). */
function sharedAt(
  firsts: readonly FirstAnswer[],
  replay: { root: AnswerPath; id: string },
  key: string,
  path: AnswerPath,
  named: (() => readonly string[] | undefined) | undefined,
): OutputAt {
  const first = firsts.find((each) => each.id === replay.id);
  if (!first) return { kind: 'pending' };
  const steps = named?.();
  const name = steps?.length === path.length ? namedKey(steps, replay.root) : undefined;
  const names: Record<string, string> = {};
  for (const [at, each] of Object.entries(first.named)) {
    if (first.results.has(at) && !(each in names)) names[each] = at;
  }
  const same = storedKeyFor((at) => first.results.has(at), key, name, names, first.named);
  return same === undefined
    ? { kind: 'unstored' }
    : { kind: 'shared', result: first.results.get(same), remade: remadeShared(first, same) };
}

/** The first call's output at `key` made again (see `OutputAt`'s `shared`). */
function remadeShared(first: FirstAnswer, key: string) {
  const remake = first.remade.get(key);
  if (!remake) return undefined;
  return (result: unknown) => {
    try {
      const remaking = remake(
        result,
        (under) => (under === '' ? first.members[key] : first.members[`${key}.${under}`]),
        resultsUnder(first, key),
      );
      // A Promise under it (read at the answer hook): `result` itself, as GraphQL reads it.
      if (!remaking || 'then' in remaking) return undefined;
      // A failure inside: `result` itself, whose reading GraphQL answers with its error again.
      if (remaking.errorsAt?.length) return undefined;
      const made = remaking;
      // The named keys inside it, as the answer hook reads them (see `nameInside`).
      const own = first.named[key];
      const names: Record<string, string> = {};
      const inside = first.inside.get(key);
      if (own !== undefined) {
        names[own] = key;
        const found = inside?.(made.value, (under) =>
          under === '' ? first.members[key] : first.members[`${key}.${under}`],
        );
        for (const [under, name] of Object.entries(found ?? {})) {
          names[`${own}.${name}`] ??= `${key}.${under}`;
        }
      }
      return { wire: made.value, key, members: { ...first.members }, names, named: own };
    } catch {
      return undefined;
    }
  };
}

/**
 * The stored key that answers a replayed field at response key `key` whose named key is
 * `name` (undefined where the replay cannot tell it): by its named key first (a retry may give
 * the first call's aliases to other fields), then by its response key, unless the first answer
 * knew that key's output as another field's (`told`: key to named key, where known; else read
 * back from `names`). Undefined: nothing stored answers it.
 */
export function storedKeyFor(
  has: (key: string) => boolean,
  key: string,
  name: string | undefined,
  names: Readonly<Record<string, string>> = {},
  told?: Readonly<Record<string, string>>,
): string | undefined {
  if (name !== undefined) {
    if (told?.[key] === name && has(key)) return key;
    const first = Object.prototype.hasOwnProperty.call(names, name) ? names[name] : undefined;
    if (first !== undefined && has(first)) return first;
  }
  if (!has(key)) return undefined;
  const known = told ? told[key] : Object.entries(names).find(([, at]) => at === key)?.[0];
  if (name !== undefined && known !== undefined && known !== name) return undefined;
  return key;
}

/**
 * How long a replay that meets an answer whose outputs are pending waits for them: what is
 * left of `boundMs` since the answer was stored (`finishedAgeMs`, when known), never below 0.
 */
export function pendingWaitMs(finishedAgeMs: number | undefined, boundMs: number): number {
  return Math.max(0, boundMs - Math.max(0, finishedAgeMs ?? 0));
}

/**
 * How long after its commit an answer's pending outputs are waited for (see `pendingWaitMs`):
 * where its first call runs in this process (`completingFor`), its operation still resolving,
 * it is known alive, and its outputs are waited for until its lease would lapse (a slow
 * middleware: a permissions or translation service, adversary 81), its own wait so bounded
 * too; elsewhere nothing tells it alive (no heartbeat renews a finished key), and a third of
 * the lease, at most 10 s (`storeWaitMs`), tells a stopped process from a slow answer.
 */
export function pendingBoundMs(leaseMs: number, aliveHere: boolean): number {
  // Elsewhere: as `storeWaitMs` (run-field.ts), which imports this file.
  return aliveHere ? Math.max(1, leaseMs) : Math.min(10_000, Math.max(1, Math.floor(leaseMs / 3)));
}

/**
 * The answers of this process whose outputs are being completed, by their key (`idOf`): a
 * replay here waits for the completion itself rather than ask the store again.
 */
const completing = new Map<string, { done: Promise<unknown>; context: unknown }>();

/**
 * Notes that the answer of key `id` is completed by `done` (its new stored form, if stored),
 * at the answer hook of the operation whose GraphQL context is `context`.
 */
export function noteCompleting(id: string, done: Promise<unknown>, context?: unknown): void {
  const entry = { done, context };
  completing.set(id, entry);
  void done.finally(() => {
    if (completing.get(id) === entry) completing.delete(id);
  });
}

/** The completion of key `id`'s answer under way in this process, if any. */
export function completingFor(id: string): Promise<unknown> | undefined {
  return completing.get(id)?.done;
}

/**
 * Whether key `id`'s answer is completed by the answer hook of the operation of `context`
 * itself (the key twice in one operation): a field of that operation that waited for it would
 * wait for its own operation's end, which comes only after it.
 */
export function completedInOperation(id: string, context: unknown): boolean {
  const entry = completing.get(id);
  return entry !== undefined && entry.context !== undefined && entry.context === context;
}
