-- The library's tables, as its TypeORM migrations leave them (IDEMPOTENCY_MIGRATIONS), for
-- teams that migrate with other tools (Flyway, Liquibase, sqitch, plain psql). A test applies
-- this file and the migrations to two fresh databases and compares the results, column by
-- column, constraint by constraint and index by index.

CREATE TABLE idempotency_keys (
  tenant_id        text        NOT NULL,
  key              text        NOT NULL CHECK (length(key) BETWEEN 1 AND 255),
  fingerprint      bytea       NOT NULL,                  -- SHA-256 of the canonical request
  state            text        NOT NULL DEFAULT 'started' CHECK (state IN ('started', 'done')),
  recovery_point   text        NOT NULL DEFAULT 'start',  -- the last completed atomic phase
  locked_until     timestamptz,                           -- the lease
  lock_version     bigint      NOT NULL DEFAULT 0,        -- fencing token, with claim_id
  response_code    int,
  response_body    bytea,
  created_at       timestamptz NOT NULL DEFAULT now(),
  claim_id         uuid        NOT NULL DEFAULT gen_random_uuid(),  -- base of derived keys
  response_headers jsonb,
  phase_results    jsonb       NOT NULL DEFAULT '{}',     -- what each completed phase returned
  finished_at      timestamptz,                           -- the retention window starts here
  leased_at        timestamptz,                           -- a takeover's hold began (NULL: created_at)
  PRIMARY KEY (tenant_id, key),
  CONSTRAINT idempotency_keys_tenant_id_length CHECK (length(tenant_id) BETWEEN 1 AND 255)
) WITH (fillfactor = 70);

-- BRIN: rows arrive in created_at order; the purge finds its candidates through it.
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys USING brin (created_at)
  WITH (autosummarize = on);

CREATE TABLE processed_messages (
  consumer     text        NOT NULL CHECK (length(consumer) BETWEEN 1 AND 255),
  message_id   text        NOT NULL CHECK (length(message_id) BETWEEN 1 AND 255),
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, message_id)
);
CREATE INDEX processed_messages_processed_at_idx ON processed_messages (processed_at);

CREATE TABLE message_failures (
  consumer       text        NOT NULL CHECK (length(consumer) BETWEEN 1 AND 255),
  message_id     text        NOT NULL CHECK (length(message_id) BETWEEN 1 AND 255),
  attempts       int         NOT NULL DEFAULT 1,    -- failed deliveries so far
  last_error     text,
  last_failed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, message_id)
);
CREATE INDEX message_failures_last_failed_at_idx ON message_failures (last_failed_at);

-- Large stored responses by pointer (the largeResponses option): written in the transaction
-- that finishes their key, which keeps their id, length and SHA-256.
CREATE TABLE idempotency_response_bodies (
  id         uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
  tenant_id  text        NOT NULL,
  key        text        NOT NULL,
  claim_id   uuid        NOT NULL,
  body       bytea       NOT NULL,
  created_at timestamptz NOT NULL DEFAULT now(),
  expires_at timestamptz                           -- set when the key is not in idempotency_keys
);
CREATE INDEX idempotency_response_bodies_created_at_idx ON idempotency_response_bodies
  USING brin (created_at) WITH (autosummarize = on);
