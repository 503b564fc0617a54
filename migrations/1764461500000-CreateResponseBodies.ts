import { type MigrationInterface, type QueryRunner } from 'typeorm';

/**
 * Large stored responses kept apart from their key (the `largeResponses` option): the key's
 * row holds a pointer with the body's length and SHA-256, and the body lives here, written in
 * the transaction that finishes the key. Rows whose key is gone are purged with the keys; a
 * body of a key kept elsewhere (Redis, which expires keys on its own) carries `expires_at`.
 */
export class CreateResponseBodies1764461500000 implements MigrationInterface {
  name = 'CreateResponseBodies1764461500000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE idempotency_response_bodies (
        id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
        tenant_id  text        NOT NULL,
        key        text        NOT NULL,
        claim_id   uuid        NOT NULL,
        body       bytea       NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        expires_at timestamptz
      )`);
    await queryRunner.query(
      `CREATE INDEX idempotency_response_bodies_created_at_idx ON idempotency_response_bodies
       USING brin (created_at) WITH (autosummarize = on)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE idempotency_response_bodies`);
  }
}
