/**
 * Objects without a prototype (`Object.create(null)`: a dictionary-style row, graphql-js'
 * argument objects echoed back with an id). A replay rebuilds a stored object as a plain one,
 * or as one naming its class (`INSTANCE` in wire-value.ts); one that had no prototype is
 * rebuilt without one, as its own data kept in the shared graph already is (typed-graph.ts),
 * so that a resolver telling such objects apart (`row instanceof Object`, `util.inspect(row)`
 * in an audit string, `isDeepStrictEqual` against a null-prototype copy) reads on a replay
 * what it read at first (adversary 109). `INSTANCE` says so with `null`: an instance of no
 * class, not even `Object`'s; an earlier version reads that as no class named, a plain object,
 * as it always did.
 */

/**
 * Whether an object of no class Nest or class-transformer know is stored as one without a
 * prototype (`INSTANCE` null); any other is rebuilt plain, as ever.
 */
export function hasNoPrototype(value: object): boolean {
  return Object.getPrototypeOf(value) === null;
}

/**
 * The empty object a replay builds where `INSTANCE` names no class (`named`, as stored):
 * without a prototype where it says the first call's had none, a plain one otherwise (a record
 * stored before, or one that names nothing).
 */
export function unnamedPlain(named: unknown): object {
  return named === null ? (Object.create(null) as object) : {};
}
