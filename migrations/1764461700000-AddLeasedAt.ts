import { type MigrationInterface, type QueryRunner } from 'typeorm';

/**
 * `leased_at`: when a key's current hold began, set by a takeover (a retry resuming a key its
 * worker gave back or left, a job's next step); NULL until then, when the hold is its first
 * claim's and began at `created_at`. The health indicator and the oldest-unfinished gauge age
 * a held key from it (`coalesce(leased_at, created_at)`): aged from `created_at`, a job's later
 * step, or a request resumed by its retry long after a 503, read as a hang however briefly it
 * had run (adversary 78).
 *
 * Nullable and without a default: adding it rewrites no row, existing keys keep the reading
 * they had (from `created_at`), and no insert of the library's (the partitioned table's
 * `idempotency_claim()` included) has to name it. Not indexed: the takeover that sets it stays
 * a HOT update. Works on the partitioned table too (PostgreSQL adds it to every partition).
 */
export class AddLeasedAt1764461700000 implements MigrationInterface {
  name = 'AddLeasedAt1764461700000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE idempotency_keys ADD COLUMN leased_at timestamptz`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`ALTER TABLE idempotency_keys DROP COLUMN leased_at`);
  }
}
