/**
 * Generates the Prisma clients of the repository (examples/prisma-orders, the docs' snippets) before `tsc` compiles
 * them: the generated client is code made from a schema by the installed `prisma`, so it is not
 * committed (it would drift from the installed version) and each script that type-checks or
 * compiles the sources runs this first (`npm test`, `npm run lint`, `npm run bench`...).
 *
 * `prisma generate` needs no database and, with the engine-free client (generator
 * `prisma-client`), none of Prisma's engines; it still checks that a schema-engine binary is
 * there, and would download one (the install scripts of prisma and @prisma/engines are off in
 * package.json, and the machines this runs on may have no network). A stub stands in for it:
 * generating never runs it. Telemetry ("checkpoint") is off for the same reason.
 */
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const SCHEMAS = [
  'examples/prisma-orders/prisma/schema.prisma',
  // The docs' Prisma snippets import a client as an app's would (docs/guides/prisma.md).
  'docs/snippets/prisma/prisma/schema.prisma',
  // The on-call roster of the suite on Prisma's batched reads (prisma-batched-reads.e2e-spec.ts).
  'test/examples/support/prisma-on-call/schema.prisma',
  // The fuzzer's Prisma layer (test/fuzz/data-layers.ts).
  'test/fuzz/prisma/schema.prisma',
];

const dir = mkdtempSync(join(tmpdir(), 'prisma-generate-'));
const stub = join(dir, 'schema-engine');
writeFileSync(
  stub,
  '#!/bin/sh\necho "schema-engine stub: prisma generate does not run it" >&2\nexit 1\n',
);
chmodSync(stub, 0o755);
try {
  for (const schema of SCHEMAS) {
    const result = spawnSync(
      process.execPath,
      [join(root, 'node_modules/prisma/build/index.js'), 'generate', '--schema', schema],
      {
        cwd: root,
        encoding: 'utf8',
        env: {
          ...process.env,
          PRISMA_SCHEMA_ENGINE_BINARY: stub,
          PRISMA_ENGINES_CHECKSUM_IGNORE_MISSING: '1',
          CHECKPOINT_DISABLE: '1',
          PRISMA_HIDE_UPDATE_MESSAGE: '1',
        },
      },
    );
    if (result.status !== 0) {
      console.error(`prisma generate --schema ${schema} failed:\n${result.stdout}${result.stderr}`);
      process.exit(1);
    }
  }
} finally {
  rmSync(dir, { recursive: true, force: true });
}
