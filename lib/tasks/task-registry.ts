/** What runs a provider's `@IdempotentTask()` methods (`IdempotentTasks`), by shape. */
export interface TaskRunner {
  tick(instance: object, method: object, work: () => unknown): Promise<void>;
}

/**
 * The runner of each provider instance, bound by its module at start-up: before
 * `@nestjs/schedule` starts its timers (at application bootstrap), so a tick always finds it.
 */
const byInstance = new WeakMap<object, TaskRunner>();

/** Binds `instance`'s `@IdempotentTask()` methods to `runner` (its app's module). */
export function bindTasks(instance: object, runner: TaskRunner): void {
  byInstance.set(instance, runner);
}

/** The runner bound to `instance`, if its app imports `IdempotencyModule`. */
export function taskRunnerOf(instance: object): TaskRunner | undefined {
  return byInstance.get(instance);
}

/**
 * The library's wrapper of each `@IdempotentTask()` method, by the prototype it was declared
 * on and its name: what a tick calls, whatever wraps it (a timing or tracing decorator above
 * it, which the function `@nestjs/schedule` ticks is then).
 */
const declared = new WeakMap<object, Map<string | symbol, object>>();

/** Notes `tick` as the library's wrapper of `prototype`'s method `property`. */
export function declareTask(prototype: object, property: string | symbol, tick: object): void {
  const methods = declared.get(prototype) ?? new Map<string | symbol, object>();
  declared.set(prototype, methods);
  methods.set(property, tick);
}

/**
 * The library's wrapper of `instance`'s method `property`: of the class whose method it is (the
 * most derived that has one: a subclass's override before its base's); undefined where that
 * method is not one of the library's.
 */
export function declaredTask(instance: object, property: string | symbol): object | undefined {
  for (let at = Object.getPrototypeOf(instance) as object | null; at;) {
    // The class whose method it is: its own wrapper, or none (a plain override of a base's
    // task is not a task: adversary 73).
    if (Object.prototype.hasOwnProperty.call(at, property)) return declared.get(at)?.get(property);
    at = Object.getPrototypeOf(at) as object | null;
  }
  return undefined;
}

/**
 * The class below the one whose own method `property` is (a subclass's plain override) that
 * declares a task of that name, by its name (`Base.method`); undefined where there is none.
 */
export function overriddenTask(instance: object, property: string | symbol): string | undefined {
  let at = Object.getPrototypeOf(instance) as object | null;
  while (at && !Object.prototype.hasOwnProperty.call(at, property)) {
    at = Object.getPrototypeOf(at) as object | null;
  }
  for (at = at && (Object.getPrototypeOf(at) as object | null); at;) {
    if (declared.get(at)?.has(property)) {
      return `${(at as { constructor: { name: string } }).constructor.name}.${String(property)}`;
    }
    at = Object.getPrototypeOf(at) as object | null;
  }
  return undefined;
}
