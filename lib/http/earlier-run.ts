import { type ServerResponse } from 'node:http';

/**
 * The run that holds a response's key, for the request's next run to find. An app's own retry
 * outside `@Idempotent()` (rxjs `retry()` in a global interceptor) subscribes to the handler
 * again, and the library's interceptor with it, on the same request: its first run still holds
 * the key, waiting for its error to be written. Seen as another request, the retry met that
 * hold (409 `key_in_progress`), and the first run then stored the 409 as the handler's answer.
 */
const runs = new WeakMap<ServerResponse, () => Promise<void> | undefined>();

/**
 * Registers how a run gives its key back for a later run of the same request: what it returns
 * is `undefined` when the run cannot step aside (its handler still works, or its answer is
 * being written or detached), and the later run is then another claimant, as any request.
 */
export function holdRun(raw: ServerResponse, stepAside: () => Promise<void> | undefined): void {
  runs.set(raw, stepAside);
}

/**
 * For a run beginning on `raw`: the earlier run of the same request steps aside (its work
 * rolled back, its key given back), as without the library a retry runs the handler anew.
 * The promise settles once the key is free; `undefined` when there is no such run.
 */
export function earlierRunStepsAside(raw: ServerResponse): Promise<void> | undefined {
  const stepAside = runs.get(raw);
  if (!stepAside) return undefined;
  runs.delete(raw);
  return stepAside();
}
