/**
 * Where a client keeps the key of each operation it has not finished, by the user intent it
 * stands for, so that a retry (after a crash or a reload too) sends the same key. The key is
 * written before the first attempt: an operation is never sent under a key not yet kept.
 */
export interface PendingOperationStore {
  get(intent: string): Promise<string | undefined>;
  set(intent: string, key: string): Promise<void>;
  delete(intent: string): Promise<void>;
}

/** In memory: survives retries, not a restart of the process or a reload of the page. */
export class MemoryOperationStore implements PendingOperationStore {
  private readonly keys = new Map<string, string>();

  get(intent: string): Promise<string | undefined> {
    return Promise.resolve(this.keys.get(intent));
  }

  set(intent: string, key: string): Promise<void> {
    this.keys.set(intent, key);
    return Promise.resolve();
  }

  delete(intent: string): Promise<void> {
    this.keys.delete(intent);
    return Promise.resolve();
  }
}
