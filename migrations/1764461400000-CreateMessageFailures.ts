import { type MigrationInterface, type QueryRunner } from 'typeorm';

/**
 * Failed deliveries of a consumer's messages, counted apart from `processed_messages`: a
 * failure rolls back the delivery's transaction, so its count is written after, on its own.
 * After `maxAttempts` failures a message is given up (rejected, to a dead-letter queue where
 * the broker has one) rather than redelivered for ever. Purged with the processed ids.
 */
export class CreateMessageFailures1764461400000 implements MigrationInterface {
  name = 'CreateMessageFailures1764461400000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE message_failures (
        consumer       text        NOT NULL CHECK (length(consumer) BETWEEN 1 AND 255),
        message_id     text        NOT NULL CHECK (length(message_id) BETWEEN 1 AND 255),
        attempts       int         NOT NULL DEFAULT 1,
        last_error     text,
        last_failed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (consumer, message_id)
      )`);
    await queryRunner.query(
      `CREATE INDEX message_failures_last_failed_at_idx ON message_failures (last_failed_at)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE message_failures`);
  }
}
