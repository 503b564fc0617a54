import { execFile } from 'node:child_process';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

/**
 * The layers of `lib/` point down, as `.dependency-cruiser.cjs` names them (each rule says
 * why). `npm run lint` runs the same check; this keeps it in `npm test`, which CI runs.
 */
const root = join(dirname(fileURLToPath(import.meta.url)), '..');

it('keeps every layer rule of .dependency-cruiser.cjs', async () => {
  const run = promisify(execFile)(
    process.execPath,
    [
      join(root, 'node_modules/dependency-cruiser/bin/dependency-cruise.mjs'),
      'lib',
      '--config',
      '.dependency-cruiser.cjs',
      '--output-type',
      'err',
    ],
    { cwd: root },
  );
  const outcome = await run.then(
    () => 'no dependency violations',
    (error: { stdout?: string }) => error.stdout ?? String(error),
  );
  expect(outcome).toBe('no dependency violations');
}, 60_000);
