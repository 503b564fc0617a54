import { permanentRemedy } from './permanent-remedy.js';

describe('permanentRemedy', () => {
  it.each<[string, unknown, RegExp]>([
    [
      'a DEFAULT dropped (23502)',
      { code: '23502', message: 'null value in column "claim_id" violates not-null constraint' },
      /^null value in column "claim_id" .*: a column the library's inserts leave to its DEFAULT has lost it; restore it/,
    ],
    [
      'a primary key dropped (42P10)',
      {
        code: '42P10',
        message:
          'there is no unique or exclusion constraint matching the ON CONFLICT specification',
      },
      /no primary key or unique index on the columns the library's ON CONFLICT names/,
    ],
    [
      'a table missing (42P01)',
      { code: '42P01', message: 'relation "x" does not exist' },
      /: run the library's migrations/,
    ],
    [
      'a column missing (42703)',
      { code: '42703', message: 'column "y" does not exist' },
      /: run the library's migrations/,
    ],
    [
      'no privilege (42501)',
      { code: '42501', message: 'permission denied for table idempotency_keys' },
      /grant the app's role SELECT, INSERT, UPDATE, DELETE/,
    ],
    [
      'no privilege to make a partition (42501, must be owner)',
      { code: '42501', message: 'must be owner of table idempotency_keys' },
      /under partitionedExpiry the role also makes the partitions ahead, which needs the table owner's role and CREATE on its schema \(GRANT <owner> TO <role>; GRANT CREATE ON SCHEMA <schema> TO <role>/,
    ],
    [
      'a NUL in a text the library sent (22021)',
      { code: '22021', message: 'invalid byte sequence for encoding "UTF8": 0x00' },
      /^invalid byte sequence .*: a text the library sent for a key .* holds a character PostgreSQL cannot store/,
    ],
    [
      'an untranslatable character (22P05)',
      { code: '22P05', message: 'unsupported Unicode escape sequence' },
      /holds a character PostgreSQL cannot store \(a NUL, or one the database's encoding lacks\)/,
    ],
    ['anything else, as it is', { code: '42P07', message: 'other' }, /^other$/],
  ])('%s', (_name, error, expected) => {
    expect(permanentRemedy(error)).toMatch(expected);
  });
});
