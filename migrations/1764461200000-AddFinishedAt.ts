import { type MigrationInterface, type QueryRunner } from 'typeorm';

/**
 * `finished_at`: when a key stored its response, the start of its retention window. Counting
 * from `created_at` let a key that finished late (taken over after a long outage) be purged
 * moments after it finished, so its next retry ran the request again.
 *
 * Existing rows get the time of the migration (a constant default is stored once in the
 * catalog, not written into every row), so no finished key loses a day of retention; the
 * default is then dropped so that only the stored response sets it. Not indexed: an indexed
 * column would make storing the response a non-HOT update (see the purge statement).
 */
export class AddFinishedAt1764461200000 implements MigrationInterface {
  name = 'AddFinishedAt1764461200000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE idempotency_keys ADD COLUMN finished_at timestamptz DEFAULT now()`,
    );
    await queryRunner.query(`ALTER TABLE idempotency_keys ALTER COLUMN finished_at DROP DEFAULT`);
    await queryRunner.query(
      `UPDATE idempotency_keys SET finished_at = NULL WHERE state = 'started'`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE idempotency_keys DROP COLUMN finished_at`);
  }
}
