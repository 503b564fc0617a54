/**
 * What an object of the mutation's own value keeps of its own data for the app's resolvers
 * under it (a `@ResolveField()` reads its parent, at the first answer and again on every
 * replay), beside the selected fields' wire form (wire-value.ts). A replay's resolvers must
 * read what the first call's read (adversary 90):
 * - a selected object field's own data beyond its selection (`contact.email` under a selected
 *   `contact { phone }`), at any depth: its objects keep their unselected data too;
 * - a selected field's raw input behind field middleware (the email a mask hides), and the
 *   `undefined` a `@Field({ defaultValue })` filled in;
 * - all of it where the type has a field of the app's the first call did not select: a retry
 *   that selects it runs it again, on the data the first call had.
 *
 * Kept where the answer holds the selection only, as typed JSON (`PARENT`), which a stored
 * answer over `maxResponseBytes` leaves out before anything else (parent-data-within.ts).
 */

/** Where an object's unselected own data goes: none, `KEPT` (never left out), `PARENT`. */
export type OwnDataPlace = 'none' | 'kept' | 'parent';

/** How the object's own data is kept, and how its selected fields' objects are walked. */
export interface ParentKeeping {
  /** Its unselected fields' own data. */
  unselected: OwnDataPlace;
  /**
   * Whether it keeps, in `PARENT`, the raw inputs of its selected fields the answer does not
   * give back as they were (behind middleware, filled in by a `defaultValue`).
   */
  selectedInputs: boolean;
  /** How its selected fields' values are walked (see `Whole` in wire-value.ts). */
  children: false | 'class' | 'data';
}

/** What tells it. */
export interface ParentKeepingTold {
  /** Under (or an instance of) a class class-transformer serializes: all of it, in `KEPT`. */
  byClass: boolean;
  /** One of its selected fields is the app's (its unselected data in `PARENT`). */
  selectsAppField: boolean;
  /** Its type has a field the app resolves, selected or not (`hasAppField`). */
  hasAppField: boolean;
  /** Under a selected field of an object kept for the app's resolvers (`'data'`). */
  underAppParent: boolean;
}

export function parentKeeping(told: ParentKeepingTold): ParentKeeping {
  const forApp = told.selectsAppField || told.hasAppField || told.underAppParent;
  // In `PARENT` where a resolver of the app's reads it, a selected one too (adversary 93: a
  // tiny selected `greeting` put a 30 kB unselected `bio` where it was never left out, and
  // the mutation was refused as too large); in `KEPT` only for a serializer outside, which
  // reads all of it again as the answer.
  const unselected: OwnDataPlace = told.byClass ? 'kept' : forApp ? 'parent' : 'none';
  return {
    unselected,
    selectedInputs: forApp,
    children: told.byClass ? 'class' : forApp ? 'data' : false,
  };
}
