import { Inject, Injectable, Logger, type OnApplicationBootstrap } from '@nestjs/common';
import { PermanentDatabaseError } from './shapes/idempotency.errors.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from './idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from './shapes/idempotency-options.interface.js';
import { queryWithDeadline } from './connection/deadline.js';
import { IdempotencyDatabase } from './data-layers/idempotency-database.js';
import {
  type CatalogEntry,
  CHECKED_FUNCTIONS,
  CHECKED_TABLES,
  missingSchema,
  SCHEMA_CATALOG_QUERY,
  type SchemaNeeds,
} from './schema/schema-check.js';
import { IdempotencySchemaMissingError } from './schema/schema-missing.error.js';
import { StandardConformingStringsOffError } from './schema/string-syntax.error.js';

/**
 * How the app's sessions read strings (see `StandardConformingStringsOffError`), and the search
 * path the catalog query resolved the library's tables through: the library's statements run
 * with it from then on (see `IdempotencyDatabase.pinLibraryPath`).
 */
const STRING_SYNTAX_QUERY =
  "SELECT current_setting('standard_conforming_strings') AS strings, " +
  "current_setting('search_path') AS path";

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
    let strings: string | undefined;
    let path: string | undefined;
    try {
      catalog = await this.database.withConnection(async (client) => {
        const { rows } = await queryWithDeadline<CatalogEntry>(
          client,
          { text: SCHEMA_CATALOG_QUERY, values: [CHECKED_TABLES, CHECKED_FUNCTIONS] },
          this.database.timeoutMs,
        );
        const syntax = await queryWithDeadline<{ strings: string; path: string }>(
          client,
          { text: STRING_SYNTAX_QUERY },
          this.database.timeoutMs,
        );
        strings = syntax.rows[0]?.strings;
        path = syntax.rows[0]?.path;
        return rows;
      });
    } catch (error) {
      this.logger.warn(
        `the idempotency schema could not be read (${String(error)}); it is checked again ` +
          'before the next statement',
      );
      return false;
    }
    if (strings === 'off') {
      const off = new StandardConformingStringsOffError();
      this.logger.error(off.message);
      throw new PermanentDatabaseError(off, off.message);
    }
    const problems = missingSchema(this.needs, catalog);
    if (problems.length === 0) {
      if (path !== undefined) this.database.pinLibraryPath(path);
      return true;
    }
    const missing = new IdempotencySchemaMissingError(problems);
    this.logger.error(missing.message);
    throw new PermanentDatabaseError(missing, missing.message);
  }
}
