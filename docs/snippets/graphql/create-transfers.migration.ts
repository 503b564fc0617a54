// src/create-transfers.migration.ts: the app's own table, created by a migration as the library's are
import { type MigrationInterface, type QueryRunner } from 'typeorm';

export class CreateTransfers1767225600000 implements MigrationInterface {
  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(
      `CREATE TABLE transfers (id serial PRIMARY KEY, amount integer NOT NULL, "to" text NOT NULL)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query('DROP TABLE transfers');
  }
}
