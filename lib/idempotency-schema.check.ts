import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { PermanentDatabaseError } from './shapes/idempotency.errors.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from './idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from './shapes/idempotency-options.interface.js';
import { queryWithDeadline } from './connection/deadline.js';
import {
  libraryStatement,
  resolvedLibraryPath,
  searchPathNames,
} from './connection/library-path.js';
import { IdempotencyDatabase } from './data-layers/idempotency-database.js';
import {
  type CatalogEntry,
  CHECKED_FUNCTIONS,
  CHECKED_TABLES,
  missingSchema,
  PARTITION_BOUNDS_QUERY,
  type PartitionBoundFacts,
  partitionBoundsOf,
  partitionBoundsReadable,
  SCHEMA_CATALOG_QUERY,
  type SchemaNeeds,
} from './schema/schema-check.js';
import { IdempotencySchemaMissingError } from './schema/schema-missing.error.js';
import { StandardConformingStringsOffError } from './schema/string-syntax.error.js';
import {
  BINARY_PROBE,
  BinaryResultsGarbledError,
  binaryProbeMisread,
} from './schema/binary-results.js';
import { isJavaScriptClient, NativeClientError } from './schema/native-client.js';

/**
 * How the app's sessions read strings (see `StandardConformingStringsOffError`), and the search
 * path a session of the app's pool STARTS with (`reset_val`: the connection string's, the
 * role's, the database's or the server's, untouched by a `SET search_path` or `SET ROLE` its
 * code left on the pooled connection the check gets), with the role it logged in as (not a
 * `SET SESSION AUTHORIZATION`'s): what
 * the library's own statements resolve their tables through (see `resolvedLibraryPath`).
 */
const SESSION_QUERY =
  "SELECT current_setting('standard_conforming_strings') AS strings, " +
  "current_setting('search_path') AS path, " +
  "(SELECT reset_val FROM pg_settings WHERE name = 'search_path') AS default_path, " +
  // The role the session logged in as: `session_user` follows a `SET SESSION AUTHORIZATION`
  // left on the connection, the backend's own entry does not.
  'COALESCE((SELECT usename FROM pg_stat_activity WHERE pid = pg_backend_pid()), session_user)::text AS login';

/** Which of the schemas named (`$1`) exist. */
const EXISTING_SCHEMAS =
  'SELECT nspname::text AS name FROM pg_namespace WHERE nspname = ANY($1::text[])';

/** The schema `processed_messages` resolves to through the path the statement runs with. */
const MESSAGES_SCHEMA =
  'SELECT (SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace ' +
  "WHERE c.oid = to_regclass('processed_messages')) AS schema";

type PartitionBoundRow = Parameters<typeof partitionBoundsOf>[0][number];

interface SessionRow {
  strings: string;
  path: string;
  default_path: string | null;
  login: string;
}

/**
 * Reads the schema the configured stores need once the app starts (one catalog query), and
 * refuses to start when part of it is missing, saying what and how to create it. A database
 * that cannot be reached then is allowed (it may come up later): the check runs again before
 * the library's first statement, and until it passes, requests are answered with the library's
 * 500 `database_permanent` (never a 503 to retry for ever) and the log says what is missing.
 */
@Injectable()
export class IdempotencySchemaCheck implements OnApplicationBootstrap {
  private readonly logger = new Logger('Idempotency');
  private readonly needs: SchemaNeeds;

  constructor(
    private readonly database: IdempotencyDatabase,
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) options: ResolvedIdempotencyOptions,
  ) {
    this.needs = {
      partitioned: options.partitionedExpiry !== undefined,
      bodies: options.largeResponses !== undefined && options.largeResponses.store === undefined,
      layout: options.partitionedExpiry && {
        partitionMs: options.partitionedExpiry.partitionMs,
        partitionsAhead: options.partitionedExpiry.partitionsAhead,
        retentionMs: options.retentionMs,
      },
    };
    // Installed now, before any provider's start-up hook (the purger's) reaches the database.
    database.checkSchemaFirst(() => this.check());
  }

  async onApplicationBootstrap(): Promise<void> {
    try {
      await this.database.ready();
    } catch (error) {
      if (error instanceof PermanentDatabaseError) throw error.cause;
      throw error;
    }
  }

  /**
   * True once the schema is complete; false when the catalog could not be read (checked
   * again on the next statement); throws the library's 500 when something is missing.
   */
  private async check(): Promise<boolean> {
    let catalog: CatalogEntry[];
    let session: SessionRow | undefined;
    let pinned: string | undefined;
    let messagesSchema: string | undefined;
    let bounds: PartitionBoundFacts | undefined;
    try {
      catalog = await this.database.withConnection(async (client) => {
        const timeoutMs = this.database.timeoutMs;
        if (!isJavaScriptClient(client)) throw new NativeClientError();
        session = (await queryWithDeadline<SessionRow>(client, { text: SESSION_QUERY }, timeoutMs))
          .rows[0];
        // Only a client asking for binary results (pg sets `binary` from its config or
        // pg.defaults) is probed: the others read text, which pg keeps as it is.
        if ((client as { binary?: boolean }).binary) {
          const { rows: probed } = await queryWithDeadline<{ n: unknown; b: unknown }>(
            client,
            BINARY_PROBE,
            timeoutMs,
          );
          const misread = binaryProbeMisread(probed[0]);
          // Thrown here, before a catalog read on the same pool fails on garbled bytes and
          // would be taken for a database to try again.
          if (misread !== undefined) throw new BinaryResultsGarbledError(misread);
        }
        if (session?.default_path != null) {
          const { default_path: defaultPath, login } = session;
          const { rows: existing } = await queryWithDeadline<{ name: string }>(
            client,
            { text: EXISTING_SCHEMAS, values: [searchPathNames(defaultPath, login)] },
            timeoutMs,
          );
          const names = new Set(existing.map((row) => row.name));
          pinned = resolvedLibraryPath(defaultPath, login, (name) => names.has(name));
        }
        // The tables as the library's statements will resolve them: through the pinned path.
        const { rows } = await libraryStatement<CatalogEntry>(
          client,
          { text: SCHEMA_CATALOG_QUERY, values: [CHECKED_TABLES, CHECKED_FUNCTIONS] },
          timeoutMs,
          pinned,
        );
        // Where the library's path resolves the consumers' table: a delivery's record names
        // it there (it opens its transaction on the session's own path).
        const { rows: messages } = await libraryStatement<{ schema: string | null }>(
          client,
          { text: MESSAGES_SCHEMA },
          timeoutMs,
          pinned,
        );
        messagesSchema = messages[0]?.schema ?? undefined;
        // The partitions' bounds, judged by time, not by their text (adversary 110: a far
        // date is a net as MAXVALUE is), through the pinned function the catalog shows.

        if (this.needs.layout && partitionBoundsReadable(this.needs, rows)) {
          const { rows: partitions } = await libraryStatement<PartitionBoundRow>(
            client,
            // Unnamed: a named statement behind a transaction pooler without prepared
            // statements meets another instance's of that name (42P05, adversary 111).
            { text: PARTITION_BOUNDS_QUERY },
            timeoutMs,
            pinned,
          );
          bounds = partitionBoundsOf(partitions, this.needs.layout);
        }
        return rows;
      });
    } catch (error) {
      if (error instanceof BinaryResultsGarbledError || error instanceof NativeClientError) {
        this.logger.error(error.message);
        throw new PermanentDatabaseError(error, error.message);
      }
      this.logger.warn(
        `the idempotency schema could not be read (${String(error)}); it is checked again ` +
          'before the next statement',
      );
      return false;
    }
    const strings = session?.strings;
    if (session && session.default_path != null && session.path !== session.default_path) {
      // A SET left on the pooled connection (a tenant's path), or one an app's connect hook
      // sends: neither is what the library resolves its tables through.
      this.logger.warn(
        `the connection the schema check got has search_path ${session.path}, not the one its ` +
          `sessions start with (${session.default_path}): the library's statements run with ` +
          `${pinned === '' ? 'an empty path' : pinned} (the schemas of the latter that exist). ` +
          "Set the app's path in the connection string (options=-c search_path=…) or with " +
          'ALTER ROLE … SET search_path, not with a SET on its connections',
      );
    }
    if (strings === 'off') {
      const off = new StandardConformingStringsOffError();
      this.logger.error(off.message);
      throw new PermanentDatabaseError(off, off.message);
    }
    const problems = missingSchema(this.needs, catalog, bounds);
    if (problems.length === 0) {
      if (pinned !== undefined) this.database.pinLibraryPath(pinned, messagesSchema);
      return true;
    }
    const missing = new IdempotencySchemaMissingError(problems);
    this.logger.error(missing.message);
    throw new PermanentDatabaseError(missing, missing.message);
  }
}
