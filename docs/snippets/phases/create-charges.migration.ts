// create-charges.migration.ts: the app's own table, created by a migration as the library's are
import { type MigrationInterface, type QueryRunner } from 'typeorm';

export class CreateCharges1767225600000 implements MigrationInterface {
  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `CREATE TABLE charges (id uuid PRIMARY KEY DEFAULT gen_random_uuid(), amount integer NOT NULL, status text NOT NULL, "authorization" text)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE charges');
  }
}
