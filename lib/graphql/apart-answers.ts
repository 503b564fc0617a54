/**
 * A replay rebuilds the parent of a `@ResolveField()` inside a middleware output over the own
 * data kept at the first answer (app-parents.ts), and the app's resolver reads that data: a
 * selected object field (`contact`) is, to it, the raw object it read at the first answer, all
 * of its data (`contact.phone` where the answer nulled `contact` by an error under it, or
 * `contact.email` beyond its selection `{ phone }`: adversary 90). GraphQL's read of that
 * field must still give what the answer holds (the rebuilt object, or its error again): so
 * the answer is given apart, by the wrapper the library puts on such fields
 * (middleware-outputs.ts, `answerAliasReadsOf`), and the parent's property stays the raw data.
 */

/** The answers given apart, by rebuilt parent, by field name. */
const apart = new WeakMap<object, Map<string, unknown>>();
/** Whether any was given: until then a field's read costs nothing more. */
let any = false;

/** Notes that GraphQL's read of `field` of `parent` answers `answer`, not its property. */
export function answerApart(parent: object, field: string, answer: unknown): void {
  let fields = apart.get(parent);
  if (!fields) apart.set(parent, (fields = new Map()));
  fields.set(field, answer);
  any = true;
}

/** The answer given apart for `field` of `parent` (see `answerApart`), if one was. */
export function answeredApart(parent: unknown, field: string): { value: unknown } | undefined {
  if (!any || typeof parent !== 'object' || parent === null) return undefined;
  const fields = apart.get(parent);
  return fields?.has(field) ? { value: fields.get(field) } : undefined;
}

/**
 * Whether a rebuilt parent's selected object field is answered apart from its property: where
 * the parent was kept for the app's resolvers (`kept`) and its kept data holds the property
 * (what they read), for a field read as a property (a middleware field answers its stored
 * output; an app's field is computed).
 */
export function answersApart(told: {
  kept: boolean;
  resolution: 'property' | 'middleware' | 'app';
  composite: boolean;
  keptProperty: boolean;
}): boolean {
  return told.kept && told.resolution === 'property' && told.composite && told.keptProperty;
}
