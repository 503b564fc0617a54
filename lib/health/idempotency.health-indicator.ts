import { Injectable } from '@nestjs/common';
import { HealthIndicatorService, type HealthIndicatorResult } from '@nestjs/terminus';
import { HOLD_STARTED } from '../claim/postgres-statements.js';
import { IdempotencyDatabase } from '../data-layers/idempotency-database.js';
import {
  PATH_POSITION,
  SEARCH_PATH_SCHEMAS,
  UNUSABLE_IN_PATH,
} from '../schema/search-path-schemas.js';
import { storeHealth, type StoreReading } from './store-health.js';

/**
 * Whether the keys table is there (a query of it would fail on its absence, not say so), and
 * which of the privileges the library's statements use the app's role lacks on it; when it is
 * not, the schema of the role's `search_path` that holds it and the role may not use.
 */
const SCHEMA_PRESENT = {
  name: 'idempotency_health_schema_v3',
  text: `WITH ${SEARCH_PATH_SCHEMAS}
SELECT t IS NOT NULL AS present, current_user::text AS role,
  ARRAY(SELECT p FROM unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) p
    WHERE t IS NOT NULL AND NOT has_table_privilege(t, p)) AS missing,
  (SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE t IS NULL AND c.relname = 'idempotency_keys' AND c.relkind IN ('r', 'p')
      AND ${UNUSABLE_IN_PATH}
    ORDER BY ${PATH_POSITION} LIMIT 1) AS unusable_schema
FROM to_regclass('idempotency_keys') t`,
};

/**
 * The oldest unfinished keys by what holds them: a lease still running (the worker is alive,
 * its work may hang) or one that ran out (the worker died, no retry took the key over). A key
 * given back on purpose (`locked_until` NULL: a 503 to retry, see RELEASE; a job between its
 * steps) is neither. Each is aged from when its current hold began (HOLD_STARTED: its last
 * takeover, else its claim), not from its creation: a job's later step, or a request resumed
 * by its retry long after a 503, would read as hung from its first second (adversary 78).
 *
 * v2 (was v1): aged from the hold's start.
 */
const UNFINISHED_BY_LEASE = {
  name: 'idempotency_health_unfinished_v2',
  text: `SELECT
  (extract(epoch FROM clock_timestamp() - min(${HOLD_STARTED})
    FILTER (WHERE locked_until >= clock_timestamp())) * 1000)::float8 AS held_ms,
  (extract(epoch FROM clock_timestamp() - min(${HOLD_STARTED})
    FILTER (WHERE locked_until < clock_timestamp())) * 1000)::float8 AS expired_ms
FROM idempotency_keys WHERE state = 'started' AND locked_until IS NOT NULL`,
};

export interface IdempotencyHealthOptions {
  /**
   * How long a key may stay unfinished before the store is reported down: longer than the
   * slowest request (with its external calls), shorter than the time your clients retry for.
   */
  maxUnfinishedAgeMs: number;
}

/**
 * A health indicator for `@nestjs/terminus`: the idempotency store is up when PostgreSQL
 * answers (within the module's `databaseTimeoutMs`), its table is there and the app's role may
 * use its schema and write it (INSERT, UPDATE, DELETE), and no key has
 * been left unfinished for longer than `maxUnfinishedAgeMs`. Add it to the app module's
 * providers, next to `TerminusModule`.
 *
 * @example
 * @Get('health') @HealthCheck()
 * check() {
 *   return this.health.check([
 *     () => this.idempotency.isHealthy('idempotency', { maxUnfinishedAgeMs: 600_000 }),
 *   ]);
 * }
 */
@Injectable()
export class IdempotencyHealthIndicator {
  constructor(
    private readonly indicators: HealthIndicatorService,
    private readonly database: IdempotencyDatabase,
  ) {}

  async isHealthy<const Key extends string>(
    key: Key,
    { maxUnfinishedAgeMs }: IdempotencyHealthOptions,
  ): Promise<HealthIndicatorResult<Key>> {
    const indicator = this.indicators.check(key);
    const health = storeHealth(await this.read(), maxUnfinishedAgeMs);
    return health.up ? indicator.up(health.data) : indicator.down(health.data);
  }

  private async read(): Promise<StoreReading> {
    try {
      const { rows } = await this.database.query<{
        present: boolean;
        role: string;
        missing: string[];
        unusable_schema: string | null;
      }>(SCHEMA_PRESENT, []);
      const { present, role, missing, unusable_schema: unusableSchema } = rows[0];
      if (!present || missing.length > 0) {
        return {
          kind: 'read',
          schemaPresent: present,
          oldestUnfinishedAgeMs: null,
          missingPrivileges: missing,
          unusableSchema,
          role,
        };
      }
      const { rows: ages } = await this.database.query<{
        held_ms: number | null;
        expired_ms: number | null;
      }>(UNFINISHED_BY_LEASE, []);
      return {
        kind: 'read',
        schemaPresent: true,
        oldestUnfinishedAgeMs: ages[0].held_ms,
        oldestExpiredAgeMs: ages[0].expired_ms,
      };
    } catch (error) {
      const cause = (error as { cause?: unknown }).cause ?? error;
      return { kind: 'unreachable', error: String(cause) };
    }
  }
}
