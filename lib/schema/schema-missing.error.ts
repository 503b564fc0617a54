import { schemaMessage } from './schema-check.js';

/**
 * The app's database lacks tables, columns or functions the configured stores need (the
 * library's migrations did not run, or not all of them): the module refuses to start, saying
 * what is missing and how to create it. Found later (the database was down at start-up), it is
 * the cause of the requests' 500 `database_permanent`.
 */
export class IdempotencySchemaMissingError extends Error {
  constructor(readonly problems: readonly string[]) {
    super(schemaMessage(problems));
    this.name = 'IdempotencySchemaMissingError';
  }
}
