/**
 * The tables and columns the library's migrations leave (`IDEMPOTENCY_MIGRATIONS`), with the
 * type PostgreSQL's `format_type()` names for each. The doctor's own reading for now: the
 * start-up schema check (lib/storage/schema-check.ts) reads the same catalog, and the two are
 * to share one list once both exist.
 */
export const EXPECTED_SCHEMA: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  idempotency_keys: {
    tenant_id: 'text',
    key: 'text',
    fingerprint: 'bytea',
    state: 'text',
    recovery_point: 'text',
    locked_until: 'timestamp with time zone',
    lock_version: 'bigint',
    response_code: 'integer',
    response_body: 'bytea',
    created_at: 'timestamp with time zone',
    claim_id: 'uuid',
    response_headers: 'jsonb',
    phase_results: 'jsonb',
    finished_at: 'timestamp with time zone',
  },
  processed_messages: {
    consumer: 'text',
    message_id: 'text',
    processed_at: 'timestamp with time zone',
  },
  message_failures: {
    consumer: 'text',
    message_id: 'text',
    attempts: 'integer',
    last_error: 'text',
    last_failed_at: 'timestamp with time zone',
  },
  idempotency_response_bodies: {
    id: 'uuid',
    tenant_id: 'text',
    key: 'text',
    claim_id: 'uuid',
    body: 'bytea',
    created_at: 'timestamp with time zone',
    expires_at: 'timestamp with time zone',
  },
};
