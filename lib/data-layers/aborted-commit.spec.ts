import { DatabaseError } from 'pg';
import { commitsAborted } from './aborted-commit.js';
import { TransactionAbortedError } from '../transaction/seam-errors.js';

const pgError = (code: string) =>
  Object.assign(new DatabaseError(`pg ${code}`, 0, 'error'), { severity: 'ERROR', code });

describe('commitsAborted', () => {
  it.each<[string, string, unknown, boolean, boolean]>([
    ['a COMMIT whose RELEASE met 25P02', 'commit', pgError('25P02'), false, true],
    [
      'the same, as the seam hands it on',
      'commit',
      new TransactionAbortedError(pgError('23505')),
      false,
      true,
    ],
    ['a ROLLBACK that failed', 'rollback', pgError('25P02'), false, false],
    ['a deferred constraint at COMMIT', 'commit', pgError('23503'), false, false],
    ['a lost connection at COMMIT', 'commit', new Error('Connection terminated'), false, false],
    ['after the request ended', 'commit', pgError('25P02'), true, false],
  ])('%s -> %s', (_name, kind, error, ended, expected) => {
    expect(commitsAborted(kind, error, ended)).toBe(expected);
  });
});
