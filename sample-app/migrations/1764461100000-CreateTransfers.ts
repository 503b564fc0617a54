import { type MigrationInterface, type QueryRunner } from 'typeorm';

/** The table of `POST /transfers`, the route written without phases. */
export class CreateTransfers1764461100000 implements MigrationInterface {
  name = 'CreateTransfers1764461100000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE transfers (
        id            uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
        tenant_id     bigint      NOT NULL,
        amount        bigint      NOT NULL,
        from_customer text        NOT NULL,
        to_customer   text        NOT NULL,
        created_at    timestamptz NOT NULL DEFAULT now()
      )`);
    // `GET /transfers?from=` reads one tenant's transfers from one customer.
    await queryRunner.query(
      `CREATE INDEX transfers_tenant_from_idx ON transfers (tenant_id, from_customer)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE transfers`);
  }
}
