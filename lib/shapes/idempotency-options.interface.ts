import { type Pool } from 'pg';
import { type IsolationLevel } from './isolation-level.js';
import { type JsonLimits } from './json-limits.js';
import { type IdempotencyRequest } from './idempotency-request.js';
import { type IdempotencyKeySource, type KeyReader } from './key-source.js';
import { type OtelMeterProvider } from './otel-meter.js';
import { type SealingKey } from './sealing-key.js';
import { type ClaimStore } from './claim-store.interface.js';
import { type ResponseBodyStore } from './response-body-store.interface.js';
import { type ProblemRenderer } from './problem.js';

export { type IdempotencyRequest } from './idempotency-request.js';

/**
 * How the app reaches PostgreSQL: directly (`'none'`), or through a pooler in `'session'` or
 * `'transaction'` mode, where one app connection's transactions may each run on another server
 * session (see the README's "Behind a connection pooler").
 */
export type PoolerMode = 'none' | 'session' | 'transaction';

/** A tenant id: keys are scoped per tenant, stored as the design's `bigint tenant_id`. */
export type TenantId = string | number | bigint;

/** Options shared by the module (defaults) and `@Idempotent()` (per-route overrides). */
export interface IdempotencyRouteOptions {
  /**
   * Where the key is, when not in the module's key header: another header
   * (`{ header: 'X-Request-Id' }`), a field of the JSON body (`{ body: 'requestId' }`, a
   * dotted path for a nested one), or a function of the request, named for the error
   * messages (`{ name: 'the op query parameter', read: (request) => ... }`). The key is
   * checked as a header's is: 1 to 255 visible ASCII characters.
   * @default { header: headerName }
   */
  keyFrom?: IdempotencyKeySource;
  /**
   * Answer 400 when the header is missing. When false, a request without a key runs as if the
   * route were not idempotent.
   * @default true
   */
  required?: boolean;
  /**
   * How long a claim is held before another worker may take it over, in milliseconds: how
   * long a key of a worker that died stays blocked (409). With `heartbeat` (the default) a
   * live worker renews it while it runs; without, it must exceed the worst-case execution
   * time, external calls included.
   * @default 5000
   */
  leaseMs?: number;
  /**
   * The `Retry-After` of a 409 `key_in_progress`, in seconds: when a duplicate should come
   * back, about when the work it waits for is done (a route whose requests take 10 s may say
   * 5). Never more than the lease has left, never under 1.
   * @default 1
   */
  conflictRetryAfterSeconds?: number;
  /**
   * Request headers, by name, that join the fingerprint (for instance `Accept` when the
   * response format depends on it). Volatile headers must not be listed.
   * @default []
   */
  fingerprintHeaders?: string[];
  /**
   * Whether the query string joins the fingerprint's path.
   * @default false
   */
  fingerprintQuery?: boolean;
  /**
   * Extend the lease every `leaseMs / 3` while the handler runs and until its answer is
   * written (an app interceptor may still work on its value), so that a short lease gives a
   * fast takeover after a crash without a slow but live worker being taken over. Each
   * renewal is one statement on a pooled connection.
   * @default true
   */
  heartbeat?: boolean;
  /**
   * Run the handler in one transaction with its stored response: its database work (through
   * injected repositories, `dataSource.query()`, `@nestjs-cls/transactional`, or
   * `IdempotentTransaction`) and the response commit together, before a byte goes out, so a
   * retry after any failure finds either nothing done or everything done. The transaction is
   * opened by the handler's first write, not before. Turn it off only for a route that must
   * not run in a transaction (a long stream, long external work without phases): its writes
   * then commit on their own, and a failure between them and the stored response runs the
   * handler again on retry.
   * @default true
   */
  atomic?: boolean;
  /**
   * Commit the claim with the handler's work and its stored answer, in one transaction: one
   * commit per new key instead of two (the claim alone first), for a route whose work is
   * local (its writes go to this PostgreSQL). A request with the same key waits on a claim
   * that is not committed yet for at most `claimWaitMs`, then gets the stored answer, or 409
   * with `Retry-After`; a process killed before the commit leaves no trace, and the retry runs
   * at once. The claim's transaction holds a connection from the claim to the answer: the
   * first `PhaseRunner.run()` commits the claim with its work and recovery point (one commit
   * for both; a phase that fails gives the claim back without its work), unless its work takes
   * the phase's context (its derived key): that one, and the first `call()`, commit the claim
   * alone first (then as without it). `PhaseRunner.idempotencyKey()` is refused while the
   * claim is uncommitted. Do not call
   * another system from such a route without `PhaseRunner.call()`. HTTP routes on the
   * PostgreSQL claim store, atomic (a GraphQL mutation is refused at start-up).
   * @default false
   */
  oneCommit?: boolean;
  /**
   * On a `oneCommit` route: how long a request waits on a claim of its key that another
   * request has not committed yet, before it is answered 409 with `Retry-After`. It holds a
   * connection while it waits: keep it short (at most 60000).
   * @default 1000
   */
  claimWaitMs?: number;
  /**
   * The isolation level the request's transaction begins at (its reads then run in it too,
   * none before it). Without it, the first nested transaction that asks for a level
   * (`dataSource.transaction('SERIALIZABLE', …)`, `@Transactional({ isolationLevel })`) sets it,
   * if it comes before any write; one that asks for a stronger level later is refused, since
   * PostgreSQL cannot raise a transaction's level once it began.
   * @default the DataSource's isolationLevel, else PostgreSQL's default (READ COMMITTED)
   */
  isolationLevel?: IsolationLevel;
  /**
   * The deepest nesting of arrays and objects a JSON body may have (at most 512); deeper is a
   * 400 `request_invalid`, answered before anything is claimed.
   * @default 64
   */
  maxJsonDepth?: number;
  /**
   * The most digits a JSON number may have in its mantissa, and in its exponent; more is a
   * 400 `request_invalid`. Keeps the exact canonical form of every number quick to compute.
   * @default 1000
   */
  maxJsonNumberDigits?: number;
  /**
   * The most object keys a JSON body may hold in all (each object's keys are sorted for the
   * fingerprint); more is a 400 `request_invalid`.
   * @default 10000
   */
  maxJsonKeys?: number;
  /**
   * The largest response the route may give, in bytes: it is held in memory until it is
   * stored, and stored whole. A larger one rolls the route's transaction back and is answered
   * 500 `response_too_large`, which is stored as the key's answer (a retry would only grow the
   * same response again). A stream is buffered up to here, no further.
   * @default 1048576 (1 MiB)
   */
  maxResponseBytes?: number;
  /**
   * Response headers stored and replayed besides `Content-Type`, `Content-Encoding` and
   * `Location` (a request id, a rate-limit figure the answer depends on). `Set-Cookie` and the
   * hop-by-hop headers are refused at start-up: a cookie replayed to a retrying client would
   * be another session's.
   * @default []
   */
  replayHeaders?: string[];
  /**
   * The claim store that holds this route's keys, by its name in the module's `claimStores`.
   * `'postgres'` (the app's own database) is always there, and is the only one that commits
   * the handler's effects with its response: a store that cannot (Redis) is refused at
   * start-up on a route that is `atomic`, and its phases fail; see the README's "Claim stores".
   * @default 'postgres'
   */
  claimStore?: string;
}

/** Options of `IdempotencyModule.forRoot()` besides the tenant's (`TenantScope`). */
export interface IdempotencyModuleBaseOptions extends IdempotencyRouteOptions {
  /**
   * Claim stores besides the app's PostgreSQL, by name, for routes (or the module) to choose
   * with `claimStore`: a `RedisClaimStore`, or a store of your own that passes the contract
   * suite of `nestjs-idempotency-pg/testing`. The module never closes their connections.
   * @example claimStores: { redis: new RedisClaimStore(redisClient) }, claimStore: 'redis'
   */
  claimStores?: Record<string, ClaimStore>;
  /**
   * Responses larger than `overBytes` are stored by pointer: the key keeps the body's id,
   * length and SHA-256, and the body goes to `store` (by default `idempotency_response_bodies`
   * in the app's PostgreSQL, written in the transaction that finishes the key). Keeps the keys
   * table small when responses are large; see the README's "Large responses by pointer".
   * @example largeResponses: { overBytes: 16384 }
   */
  largeResponses?: { overBytes: number; store?: ResponseBodyStore };
  /**
   * Name of the request header that carries the key.
   * @default 'Idempotency-Key'
   */
  headerName?: string;
  /**
   * The TypeORM DataSource to use, by its name in `TypeOrmModule.forRoot({ name })`.
   * The library injects the app's DataSource; it never creates one.
   * @default the default DataSource
   */
  dataSource?: string;
  /**
   * The node-postgres pool the app's data layer runs on, for apps without TypeORM: Prisma
   * (`new PrismaPg(pool)`), Drizzle (`drizzle({ client: pool })`), Kysely
   * (`new PostgresDialect({ pool })`) or pg itself. Give the data layer this same pool: inside
   * an idempotent request (or a phase) its queries join the request's transaction, and its own
   * transactions nest in it as savepoints, so its writes commit with the stored answer. Outside
   * one, the pool is as it was. The library never ends it. See docs/guides/data-layers.md.
   * @default undefined (the TypeORM DataSource)
   * @example IdempotencyModule.forRoot({ globalKeys: true, pool })
   */
  pool?: Pool;
  /**
   * How long a finished key is kept, in milliseconds (the design's 24 h - 7 d). Keys older
   * than this may be purged; it must exceed the clients' retry horizon.
   * @default 86400000
   */
  retentionMs?: number;
  /**
   * How long a key left unfinished (its client gave up, no retry came) is kept, in
   * milliseconds: far longer than `retentionMs`, since the row holds the claim id its external
   * calls were keyed with, and a retry that comes after it is gone starts over.
   * @default 2592000000 (30 days)
   */
  abandonedKeyRetentionMs?: number;
  /**
   * How long a consumer's processed message id (`ProcessedMessages`) is kept, in milliseconds:
   * longer than its senders retry (webhooks: days), or a late redelivery applies again.
   * @default 604800000 (7 days)
   */
  processedMessagesRetentionMs?: number;
  /**
   * Run the batched retention purge in this process every so many milliseconds (off when
   * unset). Every instance may run it: batches skip rows another instance is deleting.
   * @default undefined (off: purge from a job of your own with `IdempotencyPurger`)
   */
  purgeIntervalMs?: number;
  /**
   * Keeps the keys in a table partitioned by time, and expires them by dropping whole
   * partitions rather than deleting rows: no dead tuples, no vacuum debt, for high volumes with
   * a short retention. Needs the `PartitionIdempotencyKeys1764461600000` migration first (see
   * the README's "Partitioned expiry"). `partitionMs` is each partition's width: a finished key
   * is kept up to `retentionMs + partitionMs`, and each claim looks its key up in every live
   * partition (about `retentionMs / partitionMs + partitionsAhead + 1`). `partitionsAhead`
   * partitions are made ahead of the live one by each purge, and by claims when they run low.
   * @default off; `true` is { partitionMs: retentionMs / 8, partitionsAhead: 2 }
   * @example partitionedExpiry: { partitionMs: 3_600_000 }
   */
  partitionedExpiry?: boolean | { partitionMs?: number; partitionsAhead?: number };
  /**
   * Rows deleted per purge statement: small batches keep locks and WAL bursts short.
   * @default 1000
   */
  purgeBatchSize?: number;
  /**
   * Upper bound on each database call the library makes, in milliseconds: past it the client
   * gets 503 and nothing is executed.
   * @default 5000
   */
  databaseTimeoutMs?: number;
  /**
   * Whether an answer is stored, by its status: a key whose answer is not stored is given
   * back with its work rolled back (on an `atomic` route), and a retry runs it again. The
   * default stores every answer once the handler ran, 5xx included, as Stripe does; return
   * `status < 500` to let clients retry a server error instead. On a route that is not
   * atomic, its writes are not rolled back: a retry repeats them.
   * @default () => true
   */
  storeIf?: (status: number) => boolean;
  /**
   * Encryption at rest of the stored responses (AES-256-GCM; off when unset): bodies and
   * headers are sealed with the first key, bound to their tenant and key, and opened with
   * whichever key sealed them. Rotate by putting a new key first; drop an old one once every
   * key it sealed is past its retention. A key is 32 bytes, as a Buffer or in base64.
   * @example encryption: { keys: [{ id: '2026-11', key: process.env.IDEMPOTENCY_KEY_2026_11! }] }
   */
  encryption?: { keys: { id: string; key: Buffer | string }[] };
  /**
   * Finished keys kept in this process's memory, so that a retry that comes back to it is
   * replayed without a query. A finished key never changes, and an entry lives at most half
   * of the key's remaining retention, so it is never stale. 0 turns it off.
   * @default 10000
   */
  replayCacheSize?: number;
  /**
   * Upper bound on the bytes of the stored responses kept in memory (larger ones are not kept).
   * @default 33554432 (32 MiB)
   */
  replayCacheBytes?: number;
  /**
   * How long an entry is trusted at most, in milliseconds.
   * @default 60000
   */
  replayCacheTtlMs?: number;
  /**
   * OpenTelemetry metrics (see the README's "Events and metrics"): `true` uses the global
   * `MeterProvider` when `@opentelemetry/api` is installed and an SDK registered one before
   * the app started, and costs nothing otherwise; `{ meterProvider }` uses that one; `false`
   * turns them off.
   * @default true
   */
  metrics?: boolean | { meterProvider: OtelMeterProvider };
  /**
   * Every event as a Nest `Logger.debug()` line, context `Idempotency`.
   * @default false
   */
  debugEvents?: boolean;
  /**
   * The connection pooler between the app and PostgreSQL, if any. `'transaction'` (PgBouncer
   * or Supavisor in transaction mode, RDS Proxy) leaves nothing on a server session: the
   * library's statements are sent unnamed (parsed on each call, rather than prepared once per
   * session), and the partitioned expiry keeps its lock and settings to one transaction per
   * partition. `'session'` and `'none'` prepare each statement once per session. Unset, the
   * library asks the database when the app starts: through a pooler (its connection announced
   * with a process id that is not the server's, as PgBouncer does in either mode) it runs as
   * with `'transaction'` and says so once in the log; directly, as with `'none'`. `'none'`
   * behind a pooler refuses to start. `'session'` behind a transaction pooler fails requests
   * with a 500 `store_misconfigured` that logs what to change.
   * @default unset: found at start-up
   * @example pooler: 'transaction'
   */
  pooler?: PoolerMode;
  /**
   * Gives the library's answers the app's own error shape. Every answer the library writes
   * goes through it: its refusals (400 key missing or invalid, 422, 409 in progress), the
   * failures it meets at commit (409 `lease_lost`, 503 when the store failed, 500
   * `response_too_large`, which is stored and replayed as shaped), and those of
   * `IdempotencyErrorFilter`. It receives the RFC 9457 problem (`status`, `headers` with any
   * `Retry-After`, `body` with `code`, `title`, `detail`) and returns the answer: the body is
   * sent as JSON, `Content-Type` is `application/json` unless `headers` says otherwise, and
   * `Retry-After` is kept. If it throws, the problem goes out as it is (and is logged).
   * @default undefined (answers are `application/problem+json`)
   * @example
   * // Stripe-style clients throw on bodies with an `error` member:
   * renderProblem: (problem) => ({
   *   body: { error: { type: 'idempotency_error', code: problem.body.code, message: problem.body.detail } },
   * })
   */
  renderProblem?: ProblemRenderer;
}

/** `tenant` and `globalKeys` as the module reads them, before its start-up check. */
export interface TenantScopeFields {
  /**
   * Maps a request to its tenant (an API credential, an account): keys are scoped per tenant,
   * so two clients that pick the same key never see each other's response. Required, unless
   * `globalKeys` says that every client of the app shares one key space. An integer, or a
   * string of 1 to 255 characters, well-formed Unicode (a UUID, a slug); anything else is a 400
   * `tenant_invalid`.
   * It may throw an HttpException (for instance 401) to refuse the request.
   * @example tenant: (req) => req.headers['x-tenant-id'] as string
   */
  tenant?: (request: IdempotencyRequest) => TenantId;
  /**
   * Declares that the app has one key space for all its clients (a service called by one
   * trusted client, say), instead of a `tenant` resolver. Two clients that pick the same key
   * would then get each other's stored response: choose it knowingly.
   * @default false
   */
  globalKeys?: boolean;
}

/**
 * Keys are scoped per tenant, or declared one key space for every client: exactly one of
 * the two, so that TypeScript refuses what the start-up check refuses.
 */
export type TenantScope =
  | { tenant: NonNullable<TenantScopeFields['tenant']>; globalKeys?: false }
  | { globalKeys: true; tenant?: undefined };

/**
 * Options of `IdempotencyModule.forRoot()`: `tenant` (or `globalKeys: true`) is required.
 * @example IdempotencyModule.forRoot({ tenant: (req) => req.headers['x-tenant-id'] as string })
 */
export type IdempotencyModuleOptions = IdempotencyModuleBaseOptions & TenantScope;

/** Any options object, as JavaScript callers may pass one: what the start-up check reads. */
export type UncheckedIdempotencyModuleOptions = IdempotencyModuleBaseOptions & TenantScopeFields;

/** The options with every default filled in: what the library works with. */
export interface ResolvedIdempotencyOptions {
  headerName: string;
  /** `headerName` lower-cased, as Node.js gives header names. */
  headerKey: string;
  dataSource?: string;
  pool?: Pool;
  retentionMs: number;
  abandonedKeyRetentionMs: number;
  processedMessagesRetentionMs: number;
  tenant: (request: IdempotencyRequest) => TenantId;
  databaseTimeoutMs: number;
  purgeIntervalMs?: number;
  purgeBatchSize: number;
  /** The partitioned layout of the keys; undefined for the plain table. */
  partitionedExpiry?: { partitionMs: number; partitionsAhead: number };
  replayCache: { size: number; bytes: number; ttlMs: number };
  storeIf: (status: number) => boolean;
  metrics: boolean | { meterProvider: OtelMeterProvider };
  debugEvents: boolean;
  /** Undefined: not set, found at start-up. */
  pooler?: PoolerMode;
  /** The app's shape of the library's answers; undefined for problem+json. */
  renderProblem?: ProblemRenderer;
  /** The encryption keys, the sealing one first; undefined when responses are stored plain. */
  sealingKeys?: SealingKey[];
  /** The stores given in `claimStores`; `'postgres'` is added by the module. */
  claimStores: Readonly<Record<string, ClaimStore>>;
  /** Bodies by pointer: off when undefined. */
  largeResponses?: { overBytes: number; store?: ResponseBodyStore };
  route: ResolvedRouteOptions;
}

export interface ResolvedRouteOptions {
  /** Where the key is read. */
  key: KeyReader;
  required: boolean;
  leaseMs: number;
  conflictRetryAfterSeconds: number;
  fingerprintHeaders: readonly string[];
  fingerprintQuery: boolean;
  heartbeat: boolean;
  atomic: boolean;
  oneCommit: boolean;
  claimWaitMs: number;
  isolationLevel?: IsolationLevel;
  json: JsonLimits;
  maxResponseBytes: number;
  /** Lower-cased: the three the library always keeps, then `replayHeaders`. */
  storedHeaders: readonly string[];
  /** The name of the route's claim store. */
  claimStore: string;
}
