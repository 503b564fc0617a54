import { type MigrationInterface, type QueryRunner } from 'typeorm';

/**
 * The design's "processed table" for at-least-once consumers: a message id is inserted in the
 * same transaction as the message's side effect, and the primary key turns a redelivery into
 * "already done". Ids are scoped by consumer, as two queues or webhook sources may reuse ids.
 */
export class CreateProcessedMessages1764460900000 implements MigrationInterface {
  name = 'CreateProcessedMessages1764460900000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE processed_messages (
        consumer     text        NOT NULL CHECK (length(consumer) BETWEEN 1 AND 255),
        message_id   text        NOT NULL CHECK (length(message_id) BETWEEN 1 AND 255),
        processed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (consumer, message_id)
      )`);
    await queryRunner.query(
      `CREATE INDEX processed_messages_processed_at_idx ON processed_messages (processed_at)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE processed_messages`);
  }
}
