import { rmSync } from 'node:fs';

export default async function globalTeardown() {
  if (globalThis.__packDir) rmSync(globalThis.__packDir, { recursive: true, force: true });
  await globalThis.__embeddedDatabase?.stop();
}
