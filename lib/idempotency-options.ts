import { type ClaimStore } from './shapes/claim-store.interface.js';
import {
  DEFAULT_CLAIM_WAIT_MS,
  DEFAULT_CONFLICT_RETRY_AFTER_SECONDS,
  DEFAULT_DATABASE_TIMEOUT_MS,
  DEFAULT_HEADER_NAME,
  DEFAULT_HEARTBEAT,
  DEFAULT_LEASE_MS,
  DEFAULT_PURGE_BATCH_SIZE,
  DEFAULT_REPLAY_CACHE_BYTES,
  DEFAULT_REPLAY_CACHE_SIZE,
  DEFAULT_REPLAY_CACHE_TTL_MS,
  DEFAULT_RETENTION_MS,
  DEFAULT_ABANDONED_KEY_RETENTION_MS,
  DEFAULT_PROCESSED_MESSAGES_RETENTION_MS,
  DEFAULT_MAX_JSON_DEPTH,
  DEFAULT_MAX_JSON_KEYS,
  DEFAULT_MAX_RESPONSE_BYTES,
  STORED_RESPONSE_HEADERS,
  DEFAULT_MAX_JSON_NUMBER_DIGITS,
  DEFAULT_PARTITIONS_AHEAD,
  DEFAULT_PARTITIONS_PER_RETENTION,
  MAX_PARTITIONS_PER_RETENTION,
  GLOBAL_KEYS_TENANT,
} from './shapes/idempotency.constants.js';
import { MAX_JSON_LIMITS } from './fingerprint/canonical-json.js';
import { ISOLATION_LEVELS, isIsolationLevel } from './transaction/isolation-level.js';
import {
  type UncheckedIdempotencyModuleOptions,
  type IdempotencyRouteOptions,
  type PoolerMode,
  type ResolvedIdempotencyOptions,
  type ResolvedRouteOptions,
} from './shapes/idempotency-options.interface.js';

import {
  headerKeyReader,
  type IdempotencyKeySource,
  keyReader,
  type KeyReader,
} from './decisions/key-source.js';

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Thrown at start-up when an option is out of range; the message says what to fix. */
export class InvalidIdempotencyOptionsError extends Error {
  constructor(message: string) {
    super(`IdempotencyModule: ${message}`);
    this.name = 'InvalidIdempotencyOptionsError';
  }
}

function positiveInteger(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value <= 0) {
    throw new InvalidIdempotencyOptionsError(`${name} must be a positive integer, got ${value}`);
  }
  return value;
}

/** Never replayed: a session's cookie, and what describes one connection, not an answer. */
const NEVER_REPLAYED = new Set([
  'set-cookie',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
  'proxy-authenticate',
  'proxy-authorization',
  'content-length',
]);

function storedHeaders(extra: string[] | undefined, base?: readonly string[]): readonly string[] {
  if (extra === undefined) return base ?? STORED_RESPONSE_HEADERS;
  const names = new Set<string>(STORED_RESPONSE_HEADERS);
  for (const header of extra) {
    if (!HEADER_NAME.test(header)) {
      throw new InvalidIdempotencyOptionsError(`replayHeaders: "${header}" is not a header name`);
    }
    if (header.startsWith('$')) {
      throw new InvalidIdempotencyOptionsError(
        `replayHeaders: "${header}" is reserved (names starting with $ mark sealed responses ` +
          'and bodies stored by pointer)',
      );
    }
    if (NEVER_REPLAYED.has(header.toLowerCase())) {
      throw new InvalidIdempotencyOptionsError(
        `replayHeaders: "${header}" is never replayed (a cookie would be another session's; ` +
          'hop-by-hop headers describe a connection, not an answer)',
      );
    }
    names.add(header.toLowerCase());
  }
  return [...names];
}

/** The longest `claimWaitMs`: past it a duplicate would hold its connection for nothing. */
const MAX_CLAIM_WAIT_MS = 60_000;

function boundedInteger(name: string, value: number | undefined, fallback: number, max: number) {
  const resolved = positiveInteger(name, value, fallback);
  if (resolved > max) {
    throw new InvalidIdempotencyOptionsError(`${name} must be at most ${max}, got ${resolved}`);
  }
  return resolved;
}

function resolveKeySource(source: IdempotencyKeySource | undefined, fallback: KeyReader) {
  if (source === undefined) return fallback;
  if (typeof source !== 'object' || source === null) {
    throw new InvalidIdempotencyOptionsError(
      'keyFrom needs { header }, { body }, { name, read } or { arg }',
    );
  }
  try {
    return keyReader(source);
  } catch (error) {
    throw new InvalidIdempotencyOptionsError((error as Error).message);
  }
}

function resolveMetrics(metrics: UncheckedIdempotencyModuleOptions['metrics']) {
  if (metrics === undefined || typeof metrics === 'boolean') return metrics ?? true;
  if (typeof metrics?.meterProvider?.getMeter !== 'function') {
    throw new InvalidIdempotencyOptionsError(
      'metrics must be true, false or { meterProvider } (an OpenTelemetry MeterProvider)',
    );
  }
  return metrics;
}

function resolveRenderProblem(render: UncheckedIdempotencyModuleOptions['renderProblem']) {
  if (render !== undefined && typeof render !== 'function') {
    throw new InvalidIdempotencyOptionsError(
      'renderProblem must be a function (problem) => ({ status?, headers?, body })',
    );
  }
  return render;
}

function resolveStoreIf(storeIf: ((status: number) => boolean) | undefined) {
  if (storeIf !== undefined && typeof storeIf !== 'function') {
    throw new InvalidIdempotencyOptionsError('storeIf must be a function (status) => boolean');
  }
  return storeIf ?? (() => true);
}

function resolveSealingKeys(keys: { id: string; key: Buffer | string }[] | undefined) {
  if (!Array.isArray(keys) || keys.length === 0) {
    throw new InvalidIdempotencyOptionsError('encryption.keys must list at least one key');
  }
  const ids = new Set<string>();
  return keys.map(({ id, key }) => {
    if (typeof id !== 'string' || id.length === 0 || Buffer.byteLength(id) > 255) {
      throw new InvalidIdempotencyOptionsError('encryption.keys: each id is 1 to 255 bytes');
    }
    if (ids.has(id)) {
      throw new InvalidIdempotencyOptionsError(`encryption.keys: the id "${id}" is used twice`);
    }
    ids.add(id);
    const bytes = Buffer.isBuffer(key) ? key : Buffer.from(String(key), 'base64');
    if (bytes.length !== 32) {
      throw new InvalidIdempotencyOptionsError(
        `encryption.keys: the key "${id}" is ${bytes.length} bytes; AES-256 needs 32 ` +
          '(generate one with: openssl rand -base64 32)',
      );
    }
    return { id, key: bytes };
  });
}

function nonNegativeInteger(name: string, value: number | undefined, fallback: number): number {
  if (value === undefined) return fallback;
  if (!Number.isSafeInteger(value) || value < 0) {
    throw new InvalidIdempotencyOptionsError(`${name} must be an integer >= 0, got ${value}`);
  }
  return value;
}

/** The name of the claim store in the app's own PostgreSQL, always there. */
export const POSTGRES_CLAIM_STORE = 'postgres';

function storeName(name: string | undefined, fallback: string): string {
  if (name === undefined) return fallback;
  if (typeof name !== 'string' || name === '') {
    throw new InvalidIdempotencyOptionsError('claimStore must be the name of a claim store');
  }
  return name;
}

const CLAIM_STORE_METHODS = [
  'claim',
  'takeOver',
  'finish',
  'release',
  'extendLease',
  'purgeBatch',
  'purgeAbandonedBatch',
  'oldestUnfinishedAgeMs',
] as const;

/** The methods `object` lacks of `methods`, in their order. */
function lacking(object: unknown, methods: readonly string[]): string[] {
  const members = (object ?? {}) as Record<string, unknown>;
  return methods.filter((method) => typeof members[method] !== 'function');
}

function resolveClaimStores(stores: Record<string, ClaimStore> | undefined) {
  if (stores === undefined) return {};
  if (typeof stores !== 'object' || stores === null) {
    throw new InvalidIdempotencyOptionsError('claimStores must map names to claim stores');
  }
  for (const [name, store] of Object.entries(stores)) {
    if (name === POSTGRES_CLAIM_STORE) {
      throw new InvalidIdempotencyOptionsError(
        `claimStores: "${POSTGRES_CLAIM_STORE}" is the app's own database, and cannot be replaced`,
      );
    }
    const lacks = lacking(store, CLAIM_STORE_METHODS);
    if (typeof store?.transactional !== 'boolean') lacks.push('transactional');
    if (lacks.length > 0) {
      throw new InvalidIdempotencyOptionsError(
        `claimStores: "${name}" is not a claim store (it has no ${lacks.join(', ')})`,
      );
    }
    const joins = lacking(store, ['finishIn', 'commitPhase']);
    if (store.transactional && joins.length > 0) {
      throw new InvalidIdempotencyOptionsError(
        `claimStores: "${name}" says it is transactional but has no ${joins.join(', ')}`,
      );
    }
  }
  return { ...stores };
}

function resolveLargeResponses(large: UncheckedIdempotencyModuleOptions['largeResponses']) {
  if (large === undefined) return undefined;
  const overBytes = positiveInteger('largeResponses.overBytes', large.overBytes, 0);
  const store = large.store;
  if (store !== undefined) {
    const missing = lacking(store, ['put', 'get', 'purgeBatch']);
    if (missing.length > 0) {
      throw new InvalidIdempotencyOptionsError(
        `largeResponses.store is not a body store (it has no ${missing.join(', ')})`,
      );
    }
  }
  return { overBytes, store };
}

function resolvePartitionedExpiry(
  option: UncheckedIdempotencyModuleOptions['partitionedExpiry'],
  retentionMs: number,
): ResolvedIdempotencyOptions['partitionedExpiry'] {
  if (option === undefined || option === false) return undefined;
  if (option !== true && (typeof option !== 'object' || option === null)) {
    throw new InvalidIdempotencyOptionsError(
      'partitionedExpiry must be true, false or { partitionMs?, partitionsAhead? }',
    );
  }
  const { partitionMs: width, partitionsAhead: ahead } = option === true ? {} : option;
  const partitionMs = positiveInteger(
    'partitionedExpiry.partitionMs',
    width,
    Math.ceil(retentionMs / DEFAULT_PARTITIONS_PER_RETENTION),
  );
  if (partitionMs > retentionMs) {
    throw new InvalidIdempotencyOptionsError(
      `partitionedExpiry.partitionMs (${partitionMs}) must be at most retentionMs ` +
        `(${retentionMs}): a partition is dropped once all of it is past the retention, so ` +
        'a wider one keeps keys for more than twice the retention',
    );
  }
  const minimum = Math.ceil(retentionMs / MAX_PARTITIONS_PER_RETENTION);
  if (partitionMs < minimum) {
    throw new InvalidIdempotencyOptionsError(
      `partitionedExpiry.partitionMs (${partitionMs}) must be at least ${minimum} ` +
        `(retentionMs / ${MAX_PARTITIONS_PER_RETENTION}): each claim looks its key up in ` +
        'every partition of the retention window, so more would slow every request down',
    );
  }
  return {
    partitionMs,
    partitionsAhead: boundedInteger(
      'partitionedExpiry.partitionsAhead',
      ahead,
      DEFAULT_PARTITIONS_AHEAD,
      MAX_PARTITIONS_PER_RETENTION,
    ),
  };
}

function isolationLevel(value: unknown): ResolvedRouteOptions['isolationLevel'] {
  if (value === undefined || isIsolationLevel(value)) return value;
  throw new InvalidIdempotencyOptionsError(
    `isolationLevel: ${String(value)} is not one of ${ISOLATION_LEVELS.join(', ')}`,
  );
}

/** Fills in a route's options over a base, validating each one. */
export function resolveRouteOptions(
  options: IdempotencyRouteOptions,
  base?: ResolvedRouteOptions,
  headerName: string = DEFAULT_HEADER_NAME,
): ResolvedRouteOptions {
  const headers = options.fingerprintHeaders ?? base?.fingerprintHeaders ?? [];
  for (const header of headers) {
    if (!HEADER_NAME.test(header)) {
      throw new InvalidIdempotencyOptionsError(
        `fingerprintHeaders: "${header}" is not a header name`,
      );
    }
  }
  return {
    key: resolveKeySource(options.keyFrom, base?.key ?? headerKeyReader(headerName)),
    required: options.required ?? base?.required ?? true,
    leaseMs: positiveInteger('leaseMs', options.leaseMs, base?.leaseMs ?? DEFAULT_LEASE_MS),
    conflictRetryAfterSeconds: positiveInteger(
      'conflictRetryAfterSeconds',
      options.conflictRetryAfterSeconds,
      base?.conflictRetryAfterSeconds ?? DEFAULT_CONFLICT_RETRY_AFTER_SECONDS,
    ),
    fingerprintHeaders: headers.map((h) => h.toLowerCase()).sort(),
    fingerprintQuery: options.fingerprintQuery ?? base?.fingerprintQuery ?? false,
    heartbeat: options.heartbeat ?? base?.heartbeat ?? DEFAULT_HEARTBEAT,
    atomic: options.atomic ?? base?.atomic ?? true,
    oneCommit: options.oneCommit ?? base?.oneCommit ?? false,
    // A duplicate holds a connection while it waits: a minute is already far past "short".
    claimWaitMs: boundedInteger(
      'claimWaitMs',
      options.claimWaitMs,
      base?.claimWaitMs ?? DEFAULT_CLAIM_WAIT_MS,
      MAX_CLAIM_WAIT_MS,
    ),
    isolationLevel: isolationLevel(options.isolationLevel ?? base?.isolationLevel),
    storedHeaders: storedHeaders(options.replayHeaders, base?.storedHeaders),
    claimStore: storeName(options.claimStore, base?.claimStore ?? POSTGRES_CLAIM_STORE),
    maxResponseBytes: positiveInteger(
      'maxResponseBytes',
      options.maxResponseBytes,
      base?.maxResponseBytes ?? DEFAULT_MAX_RESPONSE_BYTES,
    ),
    json: {
      maxDepth: boundedInteger(
        'maxJsonDepth',
        options.maxJsonDepth,
        base?.json.maxDepth ?? DEFAULT_MAX_JSON_DEPTH,
        MAX_JSON_LIMITS.maxDepth,
      ),
      maxNumberDigits: boundedInteger(
        'maxJsonNumberDigits',
        options.maxJsonNumberDigits,
        base?.json.maxNumberDigits ?? DEFAULT_MAX_JSON_NUMBER_DIGITS,
        100_000,
      ),
      maxKeys: boundedInteger(
        'maxJsonKeys',
        options.maxJsonKeys,
        base?.json.maxKeys ?? DEFAULT_MAX_JSON_KEYS,
        1_000_000,
      ),
    },
  };
}

const POOLER_MODES: readonly PoolerMode[] = ['none', 'session', 'transaction'];

function resolvePooler(pooler: PoolerMode | undefined): PoolerMode | undefined {
  // Unset: the library asks the database at start-up (see `poolerSignature`).
  if (pooler === undefined) return undefined;
  if (!POOLER_MODES.includes(pooler)) {
    throw new InvalidIdempotencyOptionsError(
      `pooler must be 'none', 'session' or 'transaction' (the pooler's mode), got ${JSON.stringify(pooler)}`,
    );
  }
  return pooler;
}

/** Fills in every default in one place and validates once, at start-up. */
export function resolveIdempotencyOptions(
  options: UncheckedIdempotencyModuleOptions = {},
): ResolvedIdempotencyOptions {
  const headerName = options.headerName ?? DEFAULT_HEADER_NAME;
  if (!HEADER_NAME.test(headerName)) {
    throw new InvalidIdempotencyOptionsError(`headerName "${headerName}" is not a header name`);
  }
  if (options.headerName !== undefined && options.keyFrom !== undefined) {
    throw new InvalidIdempotencyOptionsError(
      'give either headerName or keyFrom, not both (keyFrom: { header } names another header)',
    );
  }
  if (options.tenant !== undefined && typeof options.tenant !== 'function') {
    throw new InvalidIdempotencyOptionsError('tenant must be a function (request) => tenant id');
  }
  if (options.tenant === undefined && options.globalKeys !== true) {
    throw new InvalidIdempotencyOptionsError(
      'tenant is required: keys are scoped per tenant, so that two clients that pick the ' +
        "same key never get each other's response. Give tenant: (request) => the caller's " +
        'account or credential id, or globalKeys: true if every client shares one key space',
    );
  }
  if (options.tenant !== undefined && options.globalKeys === true) {
    throw new InvalidIdempotencyOptionsError('give either tenant or globalKeys: true, not both');
  }
  if (options.pool !== undefined && !isPool(options.pool)) {
    throw new InvalidIdempotencyOptionsError(
      'pool must be a node-postgres Pool (new Pool({ connectionString }) from pg), the one the ' +
        "app's data layer runs on",
    );
  }
  if (options.pool !== undefined && options.dataSource !== undefined) {
    throw new InvalidIdempotencyOptionsError(
      'give either pool (a node-postgres Pool, for Prisma, Drizzle or Kysely) or dataSource (a ' +
        'TypeORM DataSource), not both',
    );
  }
  const retentionMs = positiveInteger('retentionMs', options.retentionMs, DEFAULT_RETENTION_MS);
  const abandonedKeyRetentionMs = positiveInteger(
    'abandonedKeyRetentionMs',
    options.abandonedKeyRetentionMs,
    Math.max(DEFAULT_ABANDONED_KEY_RETENTION_MS, retentionMs),
  );
  if (abandonedKeyRetentionMs < retentionMs) {
    throw new InvalidIdempotencyOptionsError(
      `abandonedKeyRetentionMs (${abandonedKeyRetentionMs}) must be at least retentionMs ` +
        `(${retentionMs}): an unfinished key holds the claim its external calls were keyed with`,
    );
  }
  return {
    headerName,
    headerKey: headerName.toLowerCase(),
    dataSource: options.dataSource,
    pool: options.pool,
    retentionMs,
    abandonedKeyRetentionMs,
    processedMessagesRetentionMs: positiveInteger(
      'processedMessagesRetentionMs',
      options.processedMessagesRetentionMs,
      DEFAULT_PROCESSED_MESSAGES_RETENTION_MS,
    ),
    tenant: options.tenant ?? (() => GLOBAL_KEYS_TENANT),
    databaseTimeoutMs: positiveInteger(
      'databaseTimeoutMs',
      options.databaseTimeoutMs,
      DEFAULT_DATABASE_TIMEOUT_MS,
    ),
    purgeIntervalMs:
      options.purgeIntervalMs === undefined
        ? undefined
        : positiveInteger('purgeIntervalMs', options.purgeIntervalMs, 0),
    purgeBatchSize: positiveInteger(
      'purgeBatchSize',
      options.purgeBatchSize,
      DEFAULT_PURGE_BATCH_SIZE,
    ),
    partitionedExpiry: resolvePartitionedExpiry(options.partitionedExpiry, retentionMs),
    claimStores: resolveClaimStores(options.claimStores),
    largeResponses: resolveLargeResponses(options.largeResponses),
    sealingKeys: options.encryption && resolveSealingKeys(options.encryption.keys),
    storeIf: resolveStoreIf(options.storeIf),
    metrics: resolveMetrics(options.metrics),
    debugEvents: options.debugEvents ?? false,
    pooler: resolvePooler(options.pooler),
    renderProblem: resolveRenderProblem(options.renderProblem),
    replayCache: {
      size: nonNegativeInteger(
        'replayCacheSize',
        options.replayCacheSize,
        DEFAULT_REPLAY_CACHE_SIZE,
      ),
      bytes: positiveInteger(
        'replayCacheBytes',
        options.replayCacheBytes,
        DEFAULT_REPLAY_CACHE_BYTES,
      ),
      ttlMs: positiveInteger(
        'replayCacheTtlMs',
        options.replayCacheTtlMs,
        DEFAULT_REPLAY_CACHE_TTL_MS,
      ),
    },
    route: resolveRouteOptions(options, undefined, headerName),
  };
}

/** Whether `value` is a node-postgres pool (duck-typed: the app may load its own copy of pg). */
function isPool(value: unknown): boolean {
  const pool = value as { connect?: unknown; query?: unknown; totalCount?: unknown } | null;
  return (
    typeof pool?.connect === 'function' &&
    typeof pool.query === 'function' &&
    typeof pool.totalCount === 'number'
  );
}
