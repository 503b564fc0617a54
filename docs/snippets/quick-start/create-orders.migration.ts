// src/create-orders.migration.ts: the app's own table, created by a migration as the library's are
import { type MigrationInterface, type QueryRunner } from 'typeorm';

export class CreateOrders1767225600000 implements MigrationInterface {
  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `CREATE TABLE orders (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), tenant text NOT NULL, amount integer NOT NULL)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE orders');
  }
}
