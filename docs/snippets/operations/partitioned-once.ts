import { DataSource } from 'typeorm';
import {
  PartitionIdempotencyKeys1764461600000,
  PinPartitionFunctions1764461800000,
} from 'nestjs-idempotency-pg';

/** Once (and again after an upgrade: only what is new runs), before the app starts. */
export async function partitionIdempotencyKeys(url: string): Promise<void> {
  const once = new DataSource({
    type: 'postgres',
    url,
    migrations: [PartitionIdempotencyKeys1764461600000, PinPartitionFunctions1764461800000],
  });
  await once.initialize();
  try {
    await once.runMigrations();
  } finally {
    await once.destroy();
  }
}
