/**
 * The design's statements, as named prepared statements: PostgreSQL parses and plans each
 * once per connection, and every request after that sends only its parameters.
 *
 * The fencing token is the pair (`lock_version`, `claim_id`): `lock_version` alone repeats
 * when a key is released (deleted) and claimed anew, and a stale worker of the old claim
 * must not pass the fence of the new one.
 *
 * Time is always PostgreSQL's, never a worker's clock, so that workers on several machines
 * agree on when a lease has expired. Leases are read and written with `clock_timestamp()`,
 * the time of the statement itself: `now()` is when its transaction began, which on a busy
 * server can be before a lease another statement has just renewed.
 */

/**
 * The transaction-level advisory lock of a key (the partitioned table's `idempotency_claim()`
 * takes the same one): held by a claim that commits with its work (`oneCommit`) until its
 * commit, and tried (never waited for) by the claims that commit alone, which answer such a
 * key as held rather than wait on its uncommitted row, with every claim behind them in the
 * batcher. Length first, so that tenant 'ab' with key 'c' and tenant 'a' with key 'bc' differ.
 */
export function keyLock(tenant: string, key: string): string {
  return `hashtextextended(length(${tenant}) || ':' || ${tenant} || ${key}, 1764461600000)`;
}

/**
 * The columns of CLAIM's second branch, read from the row `k` that holds the key: what a
 * claim that did not insert answers.
 */
export const FOUND_ROW = `false, k.claim_id, k.lock_version, k.fingerprint, k.state,
       k.locked_until IS NULL OR k.locked_until < clock_timestamp(),
       ceil(extract(epoch FROM k.locked_until - clock_timestamp()))::int,
       k.response_code, k.response_body, k.response_headers,
       extract(epoch FROM clock_timestamp() - k.finished_at) * 1000`;

/**
 * The row a claim answers for a key whose lock another transaction holds and that has no row
 * it can see (a claim not committed yet): in progress, for a second (its fingerprint is the
 * request's own, which is not known to differ yet: the retry after the 409 finds the row).
 */
export function heldRow(fingerprint: string): string {
  return (
    `SELECT false, NULL::uuid, NULL::bigint, ${fingerprint}, 'started'::text, false, 1, ` +
    'NULL::int, NULL::bytea, NULL::jsonb, NULL::float8'
  );
}

/**
 * Statements 1 and 2 in one round trip. The CTE inserts (a row back: we own the key); on a
 * conflict it inserts nothing and the second branch reads the row that is there. The read is
 * a plain snapshot read, not `FOR UPDATE` as the design writes it: every decision it feeds
 * is re-checked by a write fenced on `lock_version` (takeover, phases, finish), so a lock
 * would add a write to the replay path and buy nothing. A conflicting row committed after
 * this statement's snapshot is not seen: no row comes back, and the caller runs it again.
 *
 * The insert is tried only for a key with no row in the snapshot. A conflicting insert waits
 * for the transaction that last wrote the row it meets, and a row can be held for long: a
 * transaction above READ COMMITTED renews its lease inside itself (`renewalRoute`), so it
 * holds its key's row until it commits. The retry would wait for the handler, and every claim
 * of the process batched with it or behind it. A row in the snapshot is read instead, without
 * a wait (a live lease: 409 at once); a conflict is left only with a row committed or being
 * inserted after the snapshot, which a claim (one statement) holds for a moment.
 */
export const CLAIM = {
  name: 'idempotency_claim_v5',
  text: `WITH lock AS (
  SELECT pg_try_advisory_xact_lock(${keyLock('$1::text', '$2::text')}) AS free
), claimed AS (
  INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
  SELECT $1::text, $2::text, $3::bytea, clock_timestamp() + $4::float8 * interval '1 millisecond'
  FROM lock
  WHERE lock.free AND NOT EXISTS (SELECT FROM idempotency_keys WHERE tenant_id = $1 AND key = $2)
  ON CONFLICT (tenant_id, key) DO NOTHING
  RETURNING claim_id, lock_version
)
SELECT true AS claimed, claim_id, lock_version, NULL::bytea AS fingerprint, NULL::text AS state,
       NULL::boolean AS lease_expired, NULL::int AS lease_seconds_left,
       NULL::int AS response_code, NULL::bytea AS response_body, NULL::jsonb AS response_headers,
       NULL::float8 AS finished_age_ms
FROM claimed
UNION ALL
SELECT false, claim_id, lock_version, fingerprint, state,
       locked_until IS NULL OR locked_until < clock_timestamp(),
       ceil(extract(epoch FROM locked_until - clock_timestamp()))::int,
       response_code, response_body, response_headers,
       extract(epoch FROM clock_timestamp() - finished_at) * 1000
FROM idempotency_keys
WHERE tenant_id = $1 AND key = $2
UNION ALL
${heldRow('$3::bytea')}
FROM lock
WHERE NOT lock.free AND NOT EXISTS (SELECT FROM idempotency_keys WHERE tenant_id = $1 AND key = $2)`,
};

/**
 * CLAIM for a batch of claims (`ClaimBatcher`): the claims as arrays, one element each, in
 * the batch's order; each row back carries its claim's place in the batch (`i`, from 1). As in
 * CLAIM, a claim's own insert is not seen by the read of this statement, so a key comes back
 * once, claimed or found, or not at all (a conflicting row committed after the snapshot: that
 * claim runs again). The rows are inserted in the batch's order, so that concurrent batches
 * wait on each other's keys in one order and never deadlock. As in CLAIM, a key with a row in
 * the snapshot is read, not inserted: one held key never holds the batch.
 */
export const CLAIM_BATCH = {
  name: 'idempotency_claim_batch_v3',
  text: `WITH batch AS (
  SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::float8[])
    WITH ORDINALITY AS b(tenant_id, key, fingerprint, lease_ms, i)
), locks AS MATERIALIZED (
  SELECT b.*, pg_try_advisory_xact_lock(${keyLock('b.tenant_id', 'b.key')}) AS free
  FROM batch b ORDER BY i
), claimed AS (
  INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until)
  SELECT tenant_id, key, fingerprint, clock_timestamp() + lease_ms * interval '1 millisecond'
  FROM locks b
  WHERE b.free AND NOT EXISTS (
    SELECT FROM idempotency_keys k WHERE k.tenant_id = b.tenant_id AND k.key = b.key)
  ORDER BY i
  ON CONFLICT (tenant_id, key) DO NOTHING
  RETURNING tenant_id, key, claim_id, lock_version
)
SELECT b.i, true AS claimed, c.claim_id, c.lock_version, NULL::bytea AS fingerprint,
       NULL::text AS state, NULL::boolean AS lease_expired, NULL::int AS lease_seconds_left,
       NULL::int AS response_code, NULL::bytea AS response_body, NULL::jsonb AS response_headers,
       NULL::float8 AS finished_age_ms
FROM claimed c JOIN batch b ON b.tenant_id = c.tenant_id AND b.key = c.key
UNION ALL
SELECT b.i, false, k.claim_id, k.lock_version, k.fingerprint, k.state,
       k.locked_until IS NULL OR k.locked_until < clock_timestamp(),
       ceil(extract(epoch FROM k.locked_until - clock_timestamp()))::int,
       k.response_code, k.response_body, k.response_headers,
       extract(epoch FROM clock_timestamp() - k.finished_at) * 1000
FROM batch b JOIN idempotency_keys k ON k.tenant_id = b.tenant_id AND k.key = b.key
UNION ALL
SELECT b.i, ${heldRow('b.fingerprint').replace('SELECT ', '')}
FROM locks b
WHERE NOT b.free AND NOT EXISTS (
  SELECT FROM idempotency_keys k WHERE k.tenant_id = b.tenant_id AND k.key = b.key)`,
};

/**
 * Statement 3: only one worker can move `lock_version` on from the value it read. A row that
 * another transaction holds locked is skipped (no row back: 409), never waited on: a lease
 * that looks expired from outside may be renewed inside a transaction above READ COMMITTED
 * that holds the row until it commits (see CLAIM), so its owner is alive; else the holder is
 * another takeover, or the owner renewing, finishing or giving the key back, all of which
 * end in a moment (the retry after the 409 finds what they left).
 *
 * `leased_at`: the new hold begins now. Health and the oldest-unfinished gauge age a held key
 * from it (see HOLD_STARTED), not from `created_at`: a job's later step, or a request resumed
 * by its retry long after a 503, is as young as its hold (adversary 78).
 *
 * v5 (was v4): sets `leased_at`.
 */
export const TAKE_OVER = {
  name: 'idempotency_take_over_v5',
  text: `WITH free AS (
  SELECT FROM idempotency_keys WHERE tenant_id = $1 AND key = $2 FOR UPDATE SKIP LOCKED
)
UPDATE idempotency_keys
SET locked_until = clock_timestamp() + $5 * interval '1 millisecond', lock_version = lock_version + 1,
    leased_at = clock_timestamp()
WHERE tenant_id = $1 AND key = $2 AND state = 'started'
  AND (locked_until IS NULL OR locked_until < clock_timestamp()) AND lock_version = $3
  AND claim_id = $4 AND EXISTS (SELECT FROM free)
RETURNING claim_id, lock_version, recovery_point, phase_results`,
};

/**
 * Statement 5, fenced: zero rows means another worker owns the key now. `finished_at` is when
 * the retention window starts: a key that finished late (taken over after a long outage) is
 * kept for the whole window after it finished, not after it was first claimed.
 */
export const COMPLETE = {
  name: 'idempotency_complete_v3',
  text: `UPDATE idempotency_keys
SET state = 'done', response_code = $5, response_body = $6, response_headers = $7,
    recovery_point = 'finished', locked_until = NULL, finished_at = clock_timestamp()
WHERE tenant_id = $1 AND key = $2 AND lock_version = $3 AND claim_id = $4 AND state = 'started'`,
};

/**
 * Statement 5 for a claim whose record must count as finished no earlier than `$8` (ms since
 * the epoch; a tick's record held until its slot ends: see `tickRecordFinishedAt`): its hold
 * is written by the statement that marks it done, in the same COMMIT, so that no record is
 * ever done without it (adversary 90: a hold sent after the COMMIT was lost with its
 * connection, and the purge let the slot run again).
 */
export const COMPLETE_HELD = {
  name: 'idempotency_complete_held_v1',
  text: `UPDATE idempotency_keys
SET state = 'done', response_code = $5, response_body = $6, response_headers = $7,
    recovery_point = 'finished', locked_until = NULL,
    finished_at = greatest(clock_timestamp(), to_timestamp($8::float8 / 1000))
WHERE tenant_id = $1 AND key = $2 AND lock_version = $3 AND claim_id = $4 AND state = 'started'`,
};

/**
 * A finished key's response replaced by the claim that finished it (a GraphQL answer
 * completed with its field middleware's outputs: middleware-outputs.ts), fenced by its
 * (`lock_version`, `claim_id`) and the key being done; nothing else of the row changes.
 */
export const COMPLETE_ANSWER = {
  name: 'idempotency_complete_answer_v1',
  text: `UPDATE idempotency_keys
SET response_code = $5, response_body = $6, response_headers = $7
WHERE tenant_id = $1 AND key = $2 AND lock_version = $3 AND claim_id = $4 AND state = 'done'`,
};

/**
 * Gives a claim back. With `$5` true (its handler never ran) a claim is deleted, so the key is
 * free for a corrected request, but only while it is the key's first claim and no phase has
 * advanced it: a row that was taken over (`lock_version` > 0) may carry a derived key that a
 * crashed worker already sent to an external system, and deleting it would give the next
 * claim a new `claim_id`, so the external system would see a new key and run the call twice.
 * Otherwise the row, its claim id and its completed phases stay, and only the lease ends, so
 * the next request takes the key over and resumes. The lease ends as NULL, not as a time:
 * every condition reads NULL as expired, and it tells a key its owner gave back (its retry
 * resumes it) from a lease that ran out (its worker stopped: a takeover). The two
 * statements' conditions exclude each other.
 */
export const RELEASE = {
  name: 'idempotency_release_v5',
  text: `WITH deleted AS (
  DELETE FROM idempotency_keys
  WHERE tenant_id = $1 AND key = $2 AND lock_version = $3 AND claim_id = $4 AND state = 'started'
    AND $5::boolean AND recovery_point = 'start' AND lock_version = 0
)
UPDATE idempotency_keys SET locked_until = NULL
WHERE tenant_id = $1 AND key = $2 AND lock_version = $3 AND claim_id = $4 AND state = 'started'
  AND NOT ($5::boolean AND recovery_point = 'start' AND lock_version = 0)`,
};

/**
 * Statement 4, run last in a phase's transaction: the phase's effects commit only if this
 * worker still owns the key. It records the phase's result and renews the lease, since a
 * committed phase is proof the worker is alive. The renewal counts from the commit
 * (`clock_timestamp()`, not the transaction's start) and never shortens a lease a heartbeat
 * extended during a long phase.
 */
export const ADVANCE = {
  name: 'idempotency_advance_v2',
  text: `UPDATE idempotency_keys
SET recovery_point = $5, phase_results = phase_results || jsonb_build_object($5::text, $6::jsonb),
    locked_until = GREATEST(locked_until, clock_timestamp() + $7 * interval '1 millisecond')
WHERE tenant_id = $1 AND key = $2 AND lock_version = $3 AND claim_id = $4 AND state = 'started'`,
};

/**
 * The heartbeat: extends a live worker's lease, fenced like every other write. A key its
 * worker gave back (`locked_until` NULL) is not leased again by a tick still on its way, or by
 * the heartbeat of an `@Res()` handler still running after its answer released it: the retries
 * that answer invites would meet 409 (`GREATEST` ignores the NULL).
 */
export const EXTEND_LEASE = {
  name: 'idempotency_extend_lease_v3',
  text: `UPDATE idempotency_keys
SET locked_until = GREATEST(locked_until, clock_timestamp() + $5 * interval '1 millisecond')
WHERE tenant_id = $1 AND key = $2 AND lock_version = $3 AND claim_id = $4 AND state = 'started'
  AND locked_until IS NOT NULL`,
};

/**
 * A key holding no job's steps: no step owner (`bullmq:step`, lib/jobs/job-steps.ts STEP_OWNER)
 * on the row, whatever its lease. See PURGE_ABANDONED_BATCH.
 */
export const HOLDS_NO_JOB_STEPS = `NOT (phase_results ? 'bullmq:step')`;

/**
 * Keys left unfinished for much longer than the retention: their clients gave up (during a
 * long PSP outage, say) and no retry came. Only past a horizon chosen far beyond any retry,
 * and never while a lease is live, since the row holds the claim id its external calls were
 * keyed with. `created_at` finds them through the BRIN index. The conditions are checked
 * again on each row deleted, for the reason PURGE_BATCH gives.
 *
 * A job's key that holds its steps (its step owner on the row: RELEASE_JOB_STEP) is not
 * abandoned, whatever its lease: BullMQ holds the job, delayed between its steps (the lease
 * ended on purpose) however long its delay, or failed as stalled after its worker died mid-step
 * (the lease ran out) for the operator's `job.retry()`; its next run must find its claim id and
 * phases (adversary 78: a parked key deleted, its next run called the PSP again under a new
 * derived key; adversary 80: the same for a stalled one). It is kept; a job removed from
 * BullMQ leaves its key for the operator (docs/operations/retention.md).
 *
 * v4 (was v3): leaves a step job's key whatever its lease (v3 left only a parked one).
 */
export const PURGE_ABANDONED_BATCH = {
  name: 'idempotency_purge_abandoned_v4',
  text: `DELETE FROM idempotency_keys WHERE ctid IN (
  SELECT ctid FROM idempotency_keys
  WHERE created_at < now() - $1 * interval '1 millisecond' AND state = 'started'
    AND (locked_until IS NULL OR locked_until < clock_timestamp())
    AND ${HOLDS_NO_JOB_STEPS}
  LIMIT $2 FOR UPDATE SKIP LOCKED)
  AND created_at < now() - $1 * interval '1 millisecond' AND state = 'started'
  AND (locked_until IS NULL OR locked_until < clock_timestamp())
  AND ${HOLDS_NO_JOB_STEPS}`,
};

/**
 * Message ids processed before the consumers' retention window: a redelivery later than it
 * would be applied again, so the window must outlast the senders' retries (days for webhooks).
 */
export const PURGE_PROCESSED_BATCH = {
  name: 'idempotency_purge_processed_v1',
  text: `DELETE FROM processed_messages WHERE ctid IN (
  SELECT ctid FROM processed_messages
  WHERE processed_at < now() - $1 * interval '1 millisecond'
  LIMIT $2 FOR UPDATE SKIP LOCKED)`,
};

/**
 * Statement 6, one batch: keys that finished before the retention window. The window counts
 * from `finished_at`; `created_at` (never later than it) only lets the BRIN index find the
 * candidates, since an index on `finished_at` would make storing the response a non-HOT
 * update. A key that never finished (its worker crashed and no retry came yet) is kept: it
 * holds the claim id that the external calls were keyed with and the completed phases, and
 * deleting it would make a late retry start over with a new derived key, so the PSP would
 * charge twice. `SKIP LOCKED` lets several instances purge side by side without waiting on
 * each other's batches.
 *
 * The DELETE checks the conditions again on each row it takes, at no cost to the plan: on a
 * partitioned table (`PartitionIdempotencyKeys` run, `partitionedExpiry` left off) a `ctid`
 * names a row in every partition, and without them this would delete live and unfinished
 * keys that happen to sit at the same place in another partition.
 */
export const PURGE_BATCH = {
  name: 'idempotency_purge_batch_v5',
  text: `DELETE FROM idempotency_keys WHERE ctid IN (
  SELECT ctid FROM idempotency_keys
  WHERE created_at < now() - $1 * interval '1 millisecond' AND state = 'done'
    AND finished_at < now() - $1 * interval '1 millisecond'
  LIMIT $2 FOR UPDATE SKIP LOCKED)
  AND created_at < now() - $1 * interval '1 millisecond' AND state = 'done'
  AND finished_at < now() - $1 * interval '1 millisecond'
RETURNING tenant_id, key`,
};

/**
 * When a key's current hold began: its last takeover (`leased_at`, set by TAKE_OVER), else its
 * claim (`created_at`). What health and the oldest-unfinished gauge age a held key from: a
 * key's whole life would count the time it sat unheld, between a job's steps or between a 503
 * and its retry, as the time of the step or request now running (adversary 78).
 */
export const HOLD_STARTED = 'coalesce(leased_at, created_at)';

/**
 * The age of the oldest key still unfinished (its worker crashed, or its client gave up and no
 * retry came), for the metrics' gauge. A scan of the table: it runs only when a metrics reader
 * collects (once a minute by default), and an index on `state` would make every stored
 * response a non-HOT update.
 *
 * Only keys that a worker holds or held (their lease running or run out), aged from when that
 * hold began (HOLD_STARTED). A key given back on purpose (`locked_until` NULL: a 503 to retry,
 * see RELEASE; a job between its steps) waits for a retry its client may never send, until the
 * purge: counted, it would hold the gauge at weeks.
 *
 * v3 (was v2): aged from the hold's start, not the key's creation.
 */
export const OLDEST_UNFINISHED = {
  name: 'idempotency_oldest_unfinished_v3',
  text: `SELECT (extract(epoch FROM clock_timestamp() - min(${HOLD_STARTED})) * 1000)::float8 AS age_ms
FROM idempotency_keys WHERE state = 'started' AND locked_until IS NOT NULL`,
};

/**
 * A consumer's delivery, recorded first in its transaction: a row back means it is new. A
 * second delivery of the same id in flight waits on this row's lock, then finds it committed
 * (nothing back: a duplicate) or, if the first rolled back, records it itself.
 */
export const RECORD_MESSAGE = {
  name: 'idempotency_record_message_v1',
  text: `INSERT INTO processed_messages (consumer, message_id) VALUES ($1, $2)
ON CONFLICT (consumer, message_id) DO NOTHING RETURNING 1 AS recorded`,
};

/**
 * `RECORD_MESSAGE` or `TOUCH_MESSAGE` with `processed_messages` qualified by `schema` (the one
 * the library's path resolves it to, see `IdempotencyDatabase.messagesSchema`): a delivery's
 * record opens its transaction on the session's own path, which a pooled connection may have
 * been left on (a tenant's schema), so the table is named, not looked up. Unqualified when
 * `schema` is unknown.
 */
export function inMessagesSchema(
  statement: { name: string; text: string },
  schema: string | undefined,
): { name: string; text: string } {
  if (schema === undefined) return statement;
  const qualified = `"${schema.replace(/"/g, '""')}".processed_messages`;
  return { ...statement, text: statement.text.replace(/\bprocessed_messages\b/, qualified) };
}

/** The delivery's last statement, sent with its COMMIT: its own row, so exactly one. */
export const TOUCH_MESSAGE = {
  name: 'idempotency_touch_message_v1',
  text: `UPDATE processed_messages SET processed_at = now() WHERE consumer = $1 AND message_id = $2`,
};

/**
 * A job's step, committed with its work (a BullMQ job that moved itself to the delayed set
 * and threw `DelayedError`): the key stays unfinished and its lease ends, fenced, and the job
 * is named its owner (`$5`, a phase result of the library's, `$6` the job): its next run
 * takes the key over and goes on; another job of the key waits for it (see lib/jobs). `$8`:
 * what the job's step leaves (under `$7`): its data (`{ data, over, added }`), kept with it for
 * a next run whose worker died before BullMQ had it; or, a step that holds no new data (a
 * poll, `{ added, polled: true }`), what the step before left where there was one (its data,
 * the mark of polls, or the mark that its data was forgotten: nothing changed since, adversary
 * 74), else that mark of polls (a job that takes the key over goes on from its own data:
 * adversary 75). With it, the claim's version the step committed at (`version`), which fences
 * the forget of its data (FORGET_JOB_STEP_DATA): the key's own version moves on whenever
 * another job looks at the key (claims it, finds it held, gives it back).
 *
 * v5 (was v4): the mark of polls, a poll keeping a forgotten step's mark, and `version`. A v4
 * worker reads the mark of polls as a forgotten step (it refuses a job that v5 lets go on);
 * the workers of one queue upgrade together (jobs.md).
 */
export const RELEASE_JOB_STEP = {
  name: 'idempotency_release_job_step_v5',
  text: `UPDATE idempotency_keys SET locked_until = NULL,
  phase_results = phase_results || jsonb_build_object($5::text, to_jsonb($6::text), $7::text,
    CASE WHEN $8::jsonb -> 'data' IS NULL AND phase_results -> $7::text IS NOT NULL
      THEN phase_results -> $7::text ELSE $8::jsonb END
    || jsonb_build_object('version', lock_version))
WHERE tenant_id = $1 AND key = $2 AND lock_version = $3 AND claim_id = $4 AND state = 'started'`,
};

/**
 * A job wrote its data after its step committed and it moved (BullMQ's docs' order: the move,
 * then the data): the data its key keeps (`$3`) is not its next step's, so only the time the
 * job was added (`$6`) stays, which (no data, no mark of polls) says its data was forgotten.
 * Fenced by the step: the key's step data still the one its claim (`$5`) committed at its
 * version (`$4`, the `version` RELEASE_JOB_STEP kept): a later step is never touched, and
 * another job's look at the key (which moves the key's version on) does not void it
 * (adversary 75). Nothing back: the key moved past that step.
 *
 * v2 (was v1): fenced by the step's kept `version`, not by the key's `lock_version`.
 */
export const FORGET_JOB_STEP_DATA = {
  name: 'idempotency_forget_job_step_data_v2',
  text: `UPDATE idempotency_keys
SET phase_results = phase_results || jsonb_build_object($3::text, jsonb_build_object('added', $6::bigint))
WHERE tenant_id = $1 AND key = $2 AND claim_id = $5 AND state = 'started'
  AND phase_results -> $3::text -> 'version' = to_jsonb($4::bigint)`,
};

/**
 * Notes on a job's key that BullMQ has its step's data (`$3`'s `written`), only while the
 * key keeps that step's data (`$4`, its base64 JSON): a later step's is never marked.
 */
export const MARK_JOB_STEP_DATA_WRITTEN = {
  name: 'idempotency_mark_job_step_data_written_v1',
  text: `UPDATE idempotency_keys
SET phase_results = jsonb_set(phase_results, ARRAY[$3::text, 'written'], 'true'::jsonb)
WHERE tenant_id = $1 AND key = $2 AND state = 'started' AND phase_results -> $3 ->> 'data' = $4`,
};

/**
 * A job's step whose commit failed (its work rolled back, the job moved on in Redis): noted on
 * its key (`$3`, a phase result of the library's, `$4` why), so that its next run fails for
 * good, saying so, rather than go on without it. Its row, or (its claim rolled back with the
 * step) a new one, unfinished and without a lease.
 */
export const MARK_JOB_STEP_LOST = {
  name: 'idempotency_mark_job_step_lost_v1',
  text: `WITH marked AS (
  UPDATE idempotency_keys SET locked_until = NULL,
    phase_results = phase_results || jsonb_build_object($3::text, to_jsonb($4::text))
  WHERE tenant_id = $1 AND key = $2 AND state = 'started'
  RETURNING 1
)
INSERT INTO idempotency_keys (tenant_id, key, fingerprint, locked_until, phase_results)
SELECT $1, $2, $5::bytea, NULL, jsonb_build_object($3::text, to_jsonb($4::text))
WHERE NOT EXISTS (SELECT FROM marked)
ON CONFLICT DO NOTHING`,
};

/** One more failed delivery of a message; returns how many there were. */
export const RECORD_MESSAGE_FAILURE = {
  name: 'idempotency_record_message_failure_v1',
  text: `INSERT INTO message_failures AS f (consumer, message_id, last_error) VALUES ($1, $2, $3)
ON CONFLICT (consumer, message_id) DO UPDATE
SET attempts = f.attempts + 1, last_error = EXCLUDED.last_error, last_failed_at = now()
RETURNING attempts`,
};

/** One batch of failure counts older than the processed ids' retention. */
export const PURGE_MESSAGE_FAILURES_BATCH = {
  name: 'idempotency_purge_message_failures_v1',
  text: `DELETE FROM message_failures WHERE ctid IN (
  SELECT ctid FROM message_failures
  WHERE last_failed_at < now() - $1 * interval '1 millisecond'
  LIMIT $2 FOR UPDATE SKIP LOCKED)`,
};

/**
 * A scheduled task's ticks left unfinished and unleased (their replica died mid-tick, or the
 * tick failed after a phase committed), oldest first: `$2` is the key of the oldest slot still
 * resumed (keys are their slots' ISO times, which sort as the times do), so the primary key's
 * range is read, never the task's whole history.
 */
/** The database's clock, the one every replica shares, in ms since the epoch. */
export const DATABASE_NOW = {
  name: 'idempotency_database_now_v1',
  text: `SELECT (extract(epoch FROM clock_timestamp()) * 1000)::float8 AS now_ms`,
};

/**
 * The mark of a cron occurrence (lib/tasks/tick-zone.ts `occurrenceKey`): made done by the
 * first replica to fire for it, with its zone and its tick's key (`response_headers`), kept
 * until `$6` at least; returns the mark as it stands (the one just made, or the one found). A
 * mark made meanwhile by another replica, unseen by this statement's snapshot, returns none.
 */
export const MARK_OCCURRENCE = {
  name: 'idempotency_mark_occurrence_v1',
  text: `WITH made AS (
  INSERT INTO idempotency_keys
    (tenant_id, key, fingerprint, state, recovery_point, response_headers, finished_at)
  VALUES ($1, $2, $3::bytea, 'done', 'finished', jsonb_build_object('zone', $4::text, 'slot', $5::text),
    greatest(clock_timestamp(), to_timestamp($6::float8 / 1000)))
  ON CONFLICT (tenant_id, key) DO NOTHING
  RETURNING response_headers
)
SELECT response_headers->>'zone' AS zone, response_headers->>'slot' AS slot FROM made
UNION ALL
SELECT response_headers->>'zone', response_headers->>'slot' FROM idempotency_keys
WHERE tenant_id = $1 AND key = $2
LIMIT 1`,
};

/**
 * A tick's record as its COMMIT left it, read where that COMMIT's answer was lost (a read
 * timeout, a connection gone): `NOWAIT`, so that a COMMIT still running on the server (its
 * row locked by the tick's fenced COMPLETE) is told as such (55P03) rather than read as the
 * row before it, and waited for by reading again.
 */
export const READ_TICK_RECORD = {
  name: 'idempotency_read_tick_record_v1',
  text: `SELECT state, claim_id, lock_version FROM idempotency_keys
WHERE tenant_id = $1 AND key = $2 FOR SHARE NOWAIT`,
};

export const UNFINISHED_TICKS = {
  name: 'idempotency_unfinished_ticks_v1',
  text: `SELECT key FROM idempotency_keys
WHERE tenant_id = $1 AND key >= $2 AND key < $3 AND state = 'started'
  AND (locked_until IS NULL OR locked_until < clock_timestamp())
ORDER BY key LIMIT $4`,
};
