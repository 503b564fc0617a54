/**
 * Defaults, each with the reason for its value. They are filled in once, by
 * `resolveIdempotencyOptions()`, never scattered through the code.
 */

/** The IETF draft's header name (draft-ietf-httpapi-idempotency-key-header). */
export const DEFAULT_HEADER_NAME = 'Idempotency-Key';

/**
 * 5 s, kept alive by the heartbeat (`DEFAULT_HEARTBEAT`): a key held by a worker that died
 * (a crash, a lost database) must be taken over within the retry window of ordinary clients.
 * Stripe's client retries for some 8 s in all (0.5 s to 4 s apart, Retry-After ignored): under
 * the design's 60 s every one of its retries is a 409 and the call ends without its result.
 * A live worker keeps its key however long it runs, since the heartbeat renews the lease every
 * third of it (as the Nest organisation's module does); 5 s leaves two renewals' slack.
 */
export const DEFAULT_LEASE_MS = 5_000;

/**
 * The 409's `Retry-After`, in seconds: a duplicate comes back soon, since most requests end
 * within a second or two (and its retry then replays the answer); the lease left, the old
 * rule, sent a duplicate of a 2 s request away for as long as the lease ran.
 */
export const DEFAULT_CONFLICT_RETRY_AFTER_SECONDS = 1;

/**
 * On: the short default lease is safe only while a live worker renews it. Turn it off only
 * with a lease longer than the slowest execution, external calls included.
 */
export const DEFAULT_HEARTBEAT = true;

/**
 * 1 s: a duplicate of a request whose claim commits with its work (`oneCommit`) waits that
 * long for it, holding a connection: long enough for local work to commit and be replayed,
 * short beside the lease and the database's own deadline.
 */
export const DEFAULT_CLAIM_WAIT_MS = 1_000;

/** 24 h: the low end of the design's 24 h - 7 d window; raise it for offline clients. */
export const DEFAULT_RETENTION_MS = 24 * 60 * 60 * 1000;

/**
 * 30 days for keys left unfinished: far beyond any client's retries, yet a bound, so a PSP
 * outage that clients gave up on does not grow the table for ever.
 */
export const DEFAULT_ABANDONED_KEY_RETENTION_MS = 30 * 24 * 60 * 60 * 1000;

/** 7 days for consumers' message ids: webhook senders retry for up to three days. */
export const DEFAULT_PROCESSED_MESSAGES_RETENTION_MS = 7 * 24 * 60 * 60 * 1000;

/**
 * `partitionedExpiry`'s default width is the retention over this: with 8 partitions to the
 * window, a key outlives its retention by at most an eighth of it, and a claim looks its key
 * up in about 10 partitions (each costs some 15 µs on a small server; see the README).
 */
export const DEFAULT_PARTITIONS_PER_RETENTION = 8;

/**
 * Partitions made ahead of the live one: 2 widths of slack for a purge that runs late (claims
 * make them too, when a process sees them running out).
 */
export const DEFAULT_PARTITIONS_AHEAD = 2;

/**
 * The most partitions a retention window may span, and the most made ahead: every claim looks
 * its key up in each (some 1.5 ms for 100 on a small server), so more would slow every request
 * down.
 */
export const MAX_PARTITIONS_PER_RETENTION = 100;

/** Rows per purge statement: short locks and small WAL bursts, yet few round trips. */
export const DEFAULT_PURGE_BATCH_SIZE = 1000;

/**
 * Every store call is bounded, so that an unreachable database yields a prompt 503 rather
 * than a request that hangs on a pool waiting for a connection that never comes.
 */
export const DEFAULT_DATABASE_TIMEOUT_MS = 5_000;

/**
 * Finished keys kept in memory per process: 10,000 small responses are a few MiB, and cover
 * the retries of the last minute on a busy instance.
 */
export const DEFAULT_REPLAY_CACHE_SIZE = 10_000;

/** The memory those entries may take at most. */
export const DEFAULT_REPLAY_CACHE_BYTES = 32 * 1024 * 1024;

/** Retries come within seconds or after a long backoff; a minute serves the first kind. */
export const DEFAULT_REPLAY_CACHE_TTL_MS = 60_000;

/**
 * JSON nesting a request body may have: real payloads nest a handful of levels; 64 leaves room
 * and keeps a hostile body from costing a deep recursion.
 */
export const DEFAULT_MAX_JSON_DEPTH = 64;

/**
 * Digits of a JSON number (mantissa, and exponent): no amount, id or coordinate needs more
 * than a few dozen; 1000 keeps the exact normalization of any accepted number cheap.
 */
export const DEFAULT_MAX_JSON_NUMBER_DIGITS = 1000;

/**
 * 1 MiB per response held and stored: API answers are kilobytes; a larger one is a download,
 * which belongs on a route that is not idempotent (or raises the bound knowingly).
 */
export const DEFAULT_MAX_RESPONSE_BYTES = 1024 * 1024;

/** Object keys in one JSON body: an API request has dozens; sorting 10,000 takes a millisecond. */
export const DEFAULT_MAX_JSON_KEYS = 10_000;

/** The draft's maximum is left to servers; 255 is the design's CHECK constraint. */
export const MAX_KEY_LENGTH = 255;

/** Set on every replayed response, as Stripe and the IETF draft's examples do. */
export const REPLAYED_HEADER = 'Idempotent-Replayed';

/**
 * Response headers kept with the stored response and sent again on replay: those that say
 * what the stored bytes are (type, encoding, for instance from @fastify/compress) and where
 * the created resource is.
 */
export const STORED_RESPONSE_HEADERS = ['content-type', 'content-encoding', 'location'] as const;

/** Metadata key of `@Idempotent()`'s per-route options. */
export const IDEMPOTENT_ROUTE_OPTIONS = 'idempotency:route-options';

/** Metadata key of `@IdempotentMessage()`'s options. */
export const IDEMPOTENT_MESSAGE_OPTIONS = 'idempotency:message-options';
/** `@IdempotentJob()`'s options, on the processor's method. */
export const IDEMPOTENT_JOB_OPTIONS = 'idempotency:job-options';

/** The recovery point of a claim no phase has completed yet (the design's default). */
export const START_RECOVERY_POINT = 'start';

/**
 * The tenant every key of an app with `globalKeys: true` is kept under (one key space): the
 * CLI's `keys show "" <key>` names it too, since no tenant id is empty.
 */
export const GLOBAL_KEYS_TENANT = '0';
/** `@IdempotentTask()`'s options, on the scheduled method. */
export const IDEMPOTENT_TASK_OPTIONS = 'idempotency:task-options';
