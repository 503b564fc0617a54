import { Client } from 'pg';
import { adminUrl } from './database.js';

/** The test server's `server_version_num` (150020 for 15.20). */
async function serverVersion(): Promise<number> {
  const client = new Client({ connectionString: adminUrl() });
  await client.connect();
  try {
    const { rows } = await client.query<{ server_version_num: string }>('SHOW server_version_num');
    return Number(rows[0].server_version_num);
  } finally {
    await client.end();
  }
}

export const POSTGRES_VERSION = await serverVersion();

/** The partitioned layout needs PostgreSQL 14: on 13 (the matrix runs it) its tests skip. */
export const PARTITIONS_SUPPORTED = POSTGRES_VERSION >= 140000;

export const describePartitioned = PARTITIONS_SUPPORTED ? describe : describe.skip;

if (!PARTITIONS_SUPPORTED) {
  console.warn(
    `PostgreSQL ${POSTGRES_VERSION}: the partitioned layout needs 14 or later, its tests are skipped`,
  );
}
