import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { type PendingOperationStore } from './operation-store.js';

/**
 * Pending operations in a JSON file, for Node.js: a process that is killed between attempts
 * finds its keys again when it starts, and resumes each operation with the same key. Each write
 * goes to a temporary file that replaces the old one, so a crash mid-write leaves the previous
 * version whole. Writes from one process are serialized; the file is not for sharing between
 * processes.
 */
export class FileOperationStore implements PendingOperationStore {
  private queue: Promise<unknown> = Promise.resolve();

  constructor(private readonly path: string) {}

  async get(intent: string): Promise<string | undefined> {
    await this.queue;
    return (await this.read())[intent];
  }

  set(intent: string, key: string): Promise<void> {
    return this.update((keys) => ({ ...keys, [intent]: key }));
  }

  delete(intent: string): Promise<void> {
    return this.update(({ [intent]: _gone, ...rest }) => rest);
  }

  private update(change: (keys: Record<string, string>) => Record<string, string>) {
    const next = this.queue.then(async () => {
      const keys = change(await this.read());
      await mkdir(dirname(this.path), { recursive: true });
      const temporary = `${this.path}.${process.pid}.tmp`;
      await writeFile(temporary, JSON.stringify(keys));
      await rename(temporary, this.path);
    });
    this.queue = next.catch(() => undefined);
    return next;
  }

  private async read(): Promise<Record<string, string>> {
    try {
      return JSON.parse(await readFile(this.path, 'utf8')) as Record<string, string>;
    } catch (error) {
      if ((error as { code?: string }).code === 'ENOENT') return {};
      throw error;
    }
  }
}
