// scripts/prisma-generate.mjs: `prisma generate` on a machine that cannot download Prisma's
// engines. The engine-free client (generator "prisma-client") needs no engine to be generated,
// but the CLI still looks for a schema-engine binary and downloads one when it is missing: a
// stub stands in for it (generating never runs it). Run it from the app's root, in place of
// `npx prisma generate`: node scripts/prisma-generate.mjs
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const dir = mkdtempSync(join(tmpdir(), 'prisma-generate-'));
const stub = join(dir, 'schema-engine');
writeFileSync(
  stub,
  '#!/bin/sh\necho "schema-engine stub: prisma generate does not run it" >&2\nexit 1\n',
);
chmodSync(stub, 0o755);
try {
  const result = spawnSync(
    process.execPath,
    ['node_modules/prisma/build/index.js', 'generate', ...process.argv.slice(2)],
    {
      stdio: 'inherit',
      env: {
        ...process.env,
        PRISMA_SCHEMA_ENGINE_BINARY: stub,
        PRISMA_ENGINES_CHECKSUM_IGNORE_MISSING: '1',
        CHECKPOINT_DISABLE: '1', // no telemetry call either
      },
    },
  );
  process.exitCode = result.status ?? 1;
} finally {
  rmSync(dir, { recursive: true, force: true });
}
