// create-settlements.migration.ts: the app's own table, created by a migration as the library's are
import { type MigrationInterface, type QueryRunner } from 'typeorm';

export class CreateSettlements1767225600000 implements MigrationInterface {
  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `CREATE TABLE settlements (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), account text NOT NULL, amount integer NOT NULL)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE settlements');
  }
}
