import { type MigrationInterface, type QueryRunner } from 'typeorm';

/** The sample app's own tables: charges and the refunds webhooks apply to them. */
export class CreateCharges1764461000000 implements MigrationInterface {
  name = 'CreateCharges1764461000000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE charges (
        id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
        tenant_id         bigint      NOT NULL,
        amount            int         NOT NULL CHECK (amount BETWEEN 1 AND 99999999),
        currency          text        NOT NULL,
        customer          text        NOT NULL,
        status            text        NOT NULL,
        psp_authorization text,
        amount_refunded   bigint      NOT NULL DEFAULT 0,
        created_at        timestamptz NOT NULL DEFAULT now()
      )`);
    await queryRunner.query(
      `CREATE INDEX charges_tenant_customer_idx ON charges (tenant_id, customer, created_at)`,
    );
    await queryRunner.query(`
      CREATE TABLE refunds (
        id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
        tenant_id  bigint      NOT NULL,
        charge_id  uuid        NOT NULL REFERENCES charges (id),
        event_id   text        NOT NULL,
        amount     bigint      NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
      )`);
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE refunds`);
    await queryRunner.query(`DROP TABLE charges`);
  }
}
