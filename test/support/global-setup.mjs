import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startEmbeddedPostgres } from '../../sample-app/database/embedded-postgres.js';

/**
 * Tests run against `TEST_DATABASE_URL` (or `DATABASE_URL`): any database of a server where
 * the user may create databases, since each test file creates its own. Without either, an
 * embedded PostgreSQL is started for the run, so `npm test` passes on a laptop too.
 */
export default async function globalSetup() {
  // Where the suites that install the packed package share one pack per run
  // (test/support/packed-app.ts: the first to ask packs, the others wait for it).
  process.env.IDEM_PACK_DIR = mkdtempSync(join(tmpdir(), 'idem-pack-shared-'));
  globalThis.__packDir = process.env.IDEM_PACK_DIR;
  const given = process.env.TEST_DATABASE_URL ?? process.env.DATABASE_URL;
  if (given) {
    process.env.TEST_DATABASE_URL = given;
    return;
  }
  const database = await startEmbeddedPostgres();
  process.env.TEST_DATABASE_URL = database.url;
  globalThis.__embeddedDatabase = database;
  console.log(`\n[tests] no TEST_DATABASE_URL: started an embedded PostgreSQL at ${database.url}`);
}
