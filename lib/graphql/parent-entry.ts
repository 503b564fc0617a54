import { movedRef, type ParentRef, parentRef } from './parent-graph.js';

/**
 * A noted parent's entry as stored (`StoredOutputs.parents`): its node (`p`) and its own
 * object's node (`s`) as the mutation value's `__parent` names them (parent-graph.ts), with
 * what the value's wire form says of it beside (wire-value.ts `__absent`, `__instance`): the
 * fields it lacked (`a`, absent-fields.ts), and `i: null` where it had no prototype
 * (bare-objects.ts). An output is GraphQL's answer, which holds no member of the library's, so
 * they are told here; a record stored before has `{ p }` alone, read as it always was.
 */
export type ParentEntry = ParentRef & { a?: string[]; i?: null };

/** A parent's stored entry (see `ParentEntry`): its ref, and its marks where it has any. */
export function parentEntry(
  ref: ParentRef,
  absent?: readonly string[],
  bare?: boolean,
): ParentEntry {
  return {
    ...ref,
    ...(absent && absent.length > 0 ? { a: [...absent] } : {}),
    ...(bare ? { i: null } : {}),
  };
}

/**
 * A stored entry once its graph keeps only the nodes `moved` maps (parents-within.ts): its
 * refs moved (`movedRef`), its marks as they were; undefined where its node went.
 */
export function movedEntry(
  moved: ReadonlyMap<number, number>,
  entry: ParentEntry,
): ParentEntry | undefined {
  const { p, s, ...marks } = entry;
  const ref = movedRef(moved, s === undefined ? parentRef(p) : parentRef(p, s));
  return ref && { ...ref, ...marks };
}

/** The fields a stored entry says its parent lacked (`a`), for a replay to leave off. */
export function entryAbsent(entry: unknown): unknown {
  return typeof entry === 'object' && entry !== null ? (entry as { a?: unknown }).a : undefined;
}

/** What a stored entry says of its parent's prototype (`i`: null, none), as `INSTANCE` does. */
export function entryInstance(entry: unknown): unknown {
  return typeof entry === 'object' && entry !== null && 'i' in entry
    ? (entry as { i?: unknown }).i
    : undefined;
}
