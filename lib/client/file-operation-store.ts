import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { randomUUID } from 'node:crypto';
import { dirname, resolve } from 'node:path';
import { type PendingOperationStore } from './operation-store.js';

/** The writes of every store on one file, in order: stores made per call share the file. */
const queues = new Map<string, Promise<unknown>>();

/**
 * Pending operations in a JSON file, for Node.js: a process that is killed between attempts
 * finds its keys again when it starts, and resumes each operation with the same key. Each write
 * goes to a temporary file that replaces the old one, so a crash mid-write leaves the previous
 * version whole. Writes to one file from one process are serialized, whichever store instance
 * makes them; the file is not for sharing between processes.
 */
export class FileOperationStore implements PendingOperationStore {
  private readonly path: string;

  constructor(path: string) {
    this.path = resolve(path);
  }

  async get(intent: string): Promise<string | undefined> {
    await (queues.get(this.path) ?? Promise.resolve());
    return (await this.read())[intent];
  }

  set(intent: string, key: string): Promise<void> {
    return this.update((keys) => ({ ...keys, [intent]: key }));
  }

  delete(intent: string): Promise<void> {
    return this.update(({ [intent]: _gone, ...rest }) => rest);
  }

  private update(change: (keys: Record<string, string>) => Record<string, string>) {
    const next = (queues.get(this.path) ?? Promise.resolve()).then(async () => {
      const keys = change(await this.read());
      await mkdir(dirname(this.path), { recursive: true });
      const temporary = `${this.path}.${process.pid}.${randomUUID()}.tmp`;
      await writeFile(temporary, JSON.stringify(keys));
      await rename(temporary, this.path);
    });
    queues.set(
      this.path,
      next.catch(() => undefined),
    );
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
