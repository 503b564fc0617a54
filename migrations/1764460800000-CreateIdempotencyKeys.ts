import { type MigrationInterface, type QueryRunner } from 'typeorm';

/**
 * The design's `idempotency_keys` table, with three columns it does not have, each for a
 * reason:
 * - `claim_id`: the row's own id, from which downstream keys are derived. It is new for every
 *   claim of a key (so a key reused after a purge never meets the PSP's answer for the old
 *   one) and shared by every worker that takes the claim over.
 * - `response_headers`: the stored response's content type and `Location`, replayed as sent.
 * - `phase_results`: what each completed atomic phase returned, handed to a worker that takes
 *   the key over instead of running those phases again.
 *
 * A fill factor of 70 leaves room in each page for the row's one update (the stored response),
 * so that it is a HOT update that touches no index.
 */
export class CreateIdempotencyKeys1764460800000 implements MigrationInterface {
  name = 'CreateIdempotencyKeys1764460800000';

  async up(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`
      CREATE TABLE idempotency_keys (
        tenant_id        bigint      NOT NULL,
        key              text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
        fingerprint      bytea       NOT NULL,
        state            text        NOT NULL DEFAULT 'started' CHECK (state IN ('started', 'done')),
        recovery_point   text        NOT NULL DEFAULT 'start',
        locked_until     timestamptz,
        lock_version     bigint      NOT NULL DEFAULT 0,
        response_code    int,
        response_body    bytea,
        created_at       timestamptz NOT NULL DEFAULT now(),
        claim_id         uuid        NOT NULL DEFAULT gen_random_uuid(),
        response_headers jsonb,
        phase_results    jsonb       NOT NULL DEFAULT '{}',
        PRIMARY KEY (tenant_id, key)
      ) WITH (fillfactor = 70)`);
    // BRIN, not B-tree: rows arrive in created_at order, so a block-range index serves the
    // retention purge at a fraction of a B-tree's cost on every claim's insert.
    await queryRunner.query(
      `CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys USING brin (created_at)
       WITH (autosummarize = on)`,
    );
  }

  async down(queryRunner: QueryRunner): Promise<void> {
    await queryRunner.query(`DROP TABLE idempotency_keys`);
  }
}
