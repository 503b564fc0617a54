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
    ['anything else, as it is', { code: '42P07', message: 'other' }, /^other$/],
  ])('%s', (_name, error, expected) => {
    expect(permanentRemedy(error)).toMatch(expected);
  });
});
