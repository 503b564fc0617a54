import { type MigrationInterface, type QueryRunner } from 'typeorm';
import { CREATE_PARTITIONS_FUNCTION, PARTITIONS_FUNCTION } from './partition-functions.js';

/**
 * Re-makes the partitioned layout's `idempotency_key_partitions()` and
 * `idempotency_keys_create_partitions()` as `PartitionIdempotencyKeys` makes them now
 * (adversary 108): under fixed `DateStyle` and `TimeZone` settings of their own, so that a
 * database or role with another date style and a zone printed as an ambiguous abbreviation
 * (India's `IST`, read back as Israel's) does not misread every bound by hours, and without an
 * operator's DEFAULT partition, which read as MINVALUE..MAXVALUE stopped partitions being made
 * ahead and expired. See migrations/partition-functions.ts.
 *
 * In `IDEMPOTENCY_MIGRATIONS`; on a database without the partitioned layout it does nothing
 * (a `PartitionIdempotencyKeys` run later makes the new functions itself).
 */
export class PinPartitionFunctions1764461800000 implements MigrationInterface {
  name = 'PinPartitionFunctions1764461800000';

  async up(queryRunner: QueryRunner): Promise<void> {
    const rows = (await queryRunner.query(
      `SELECT to_regprocedure('idempotency_key_partitions()') IS NOT NULL AS partitioned`,
    )) as { partitioned: boolean }[];
    if (!rows[0].partitioned) return;
    await queryRunner.query(PARTITIONS_FUNCTION);
    await queryRunner.query(CREATE_PARTITIONS_FUNCTION);
  }

  /**
   * Nothing: the functions stay as they are, which `PartitionIdempotencyKeys` makes too, and
   * which serve the library's earlier versions alike (same names, arguments and results).
   */
  async down(): Promise<void> {}
}
