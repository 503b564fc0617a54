/**
 * A statement sent elsewhere by `run` (with its arguments, less a callback), answered in the
 * form it was sent in: its callback called, or the promise returned. node-postgres' client
 * takes both forms, and code that holds one of its clients may use either.
 */
export function answered(args: unknown[], run: (args: unknown[]) => Promise<unknown>): unknown {
  const last = args[args.length - 1];
  if (typeof last !== 'function') return run(args);
  const callback = last as (error: unknown, result?: unknown) => void;
  run(args.slice(0, -1)).then(
    (result) => callback(null, result),
    (error: unknown) => callback(error),
  );
  return undefined;
}
