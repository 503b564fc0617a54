/**
 * Defines `name` on `target` as its own enumerable, writable, configurable data property,
 * never assigns it: an assignment of `__proto__` calls `Object.prototype`'s setter (the
 * object's prototype set, no own key kept), and one of a name a class defines runs its
 * setter. Wherever the library writes data keys onto an object it builds (a value as the
 * resolver returned it, a JSON document's members, a replay's rebuilt object), it writes
 * them so, so that a `JSON.parse`d document's own `"__proto__"` stays an own key.
 *
 * @example
 * const doc = {};
 * defineOwn(doc, '__proto__', { role: 'admin' });
 * Object.keys(doc); // ['__proto__'], and Object.getPrototypeOf(doc) is still Object.prototype
 */
export function defineOwn(target: object, name: string, value: unknown): void {
  Object.defineProperty(target, name, {
    value,
    enumerable: true,
    writable: true,
    configurable: true,
  });
}

/** `defineOwn` for a member under a symbol (a `Symbol.for` tag an app's resolvers read). */
export function defineOwnSymbol(target: object, symbol: symbol, value: unknown): void {
  Object.defineProperty(target, symbol, {
    value,
    enumerable: true,
    writable: true,
    configurable: true,
  });
}
