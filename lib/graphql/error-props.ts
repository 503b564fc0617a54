/**
 * Whether a replayed error takes a stored own property `name` of the first one: never over
 * what the error already has (an `HttpException`'s response and status, a method of its
 * class). `__proto__` is every object's by `Object.prototype`'s accessor, never its own data:
 * an own `__proto__` the first error had (a JSON body copied onto it) is taken, defined as
 * data, not assigned (which would set the error's prototype).
 */
export function takesStoredProp(error: object, name: string): boolean {
  if (name === '__proto__') return !Object.prototype.hasOwnProperty.call(error, name);
  return !(name in error);
}
