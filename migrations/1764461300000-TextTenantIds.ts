import { type MigrationInterface, type QueryRunner } from 'typeorm';

/**
 * Tenant ids as text: apps key their users by UUID or slug as often as by integer. Existing
 * rows keep their ids, written as the decimal text the library now gives integer tenants, so
 * every stored key is found under the same tenant as before. The type change rewrites the table
 * and its primary key once, under an exclusive lock: on a large table, run it when traffic is
 * low, or purge first. Instances of the previous version must be stopped before it runs: their
 * prepared statements were planned for a `bigint` column and fail against a `text` one.
 */
export class TextTenantIds1764461300000 implements MigrationInterface {
  name = 'TextTenantIds1764461300000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `ALTER TABLE idempotency_keys ALTER COLUMN tenant_id TYPE text USING tenant_id::text`,
    );
    await queryRunner.query(
      `ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_tenant_id_length
       CHECK (length(tenant_id) BETWEEN 1 AND 255)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    const rows = (await queryRunner.query(
      `SELECT 1 FROM idempotency_keys WHERE tenant_id !~ '^(0|-?[1-9][0-9]{0,18})$' LIMIT 1`,
    )) as unknown[];
    if (rows.length > 0) {
      throw new Error(
        'TextTenantIds cannot be reverted: idempotency_keys holds tenant ids that are not ' +
          'integers (UUIDs, slugs), which a bigint column cannot keep. Delete those rows first.',
      );
    }
    await queryRunner.query(
      `ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_tenant_id_length`,
    );
    await queryRunner.query(
      `ALTER TABLE idempotency_keys ALTER COLUMN tenant_id TYPE bigint USING tenant_id::bigint`,
    );
  }
}
