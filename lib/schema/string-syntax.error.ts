/**
 * The app's sessions read strings with `standard_conforming_strings` off (set on the
 * database, the role or the connection): a backslash in `'…'` escapes there. The library reads
 * the SQL a handler sends in an idempotent request as PostgreSQL does with it on (its default
 * since 9.1), to keep a `COMMIT` or a session setting out of the request's transaction; with
 * it off, a statement could hide one in what reads as a string. The module refuses to start.
 */
export class StandardConformingStringsOffError extends Error {
  constructor() {
    super(
      "IdempotencyModule: standard_conforming_strings is off for the app's sessions (set on " +
        'the database, the role or the connection). The library reads the SQL that handlers ' +
        'send in idempotent requests as PostgreSQL reads it with the setting on, its default: ' +
        'with it off, a backslash in a string reads differently, and a COMMIT could pass as ' +
        'part of one. Turn it on where it was turned off: ALTER DATABASE <name> RESET ' +
        'standard_conforming_strings (or ALTER ROLE <role> RESET …, or the connection’s ' +
        'options), and write strings with backslash escapes as E’…’.',
    );
    this.name = 'StandardConformingStringsOffError';
  }
}
