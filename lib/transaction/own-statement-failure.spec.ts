import { DatabaseError } from 'pg';
import { PermanentDatabaseError } from '../shapes/idempotency.errors.js';
import { ownStatementFailure } from './own-statement-failure.js';

function databaseError(code: string, message: string): DatabaseError {
  const error = new DatabaseError(message, message.length, 'error');
  error.code = code;
  error.severity = 'ERROR';
  return error;
}

describe('ownStatementFailure', () => {
  it.each<[string, unknown, boolean]>([
    ['a missing privilege', databaseError('42501', 'permission denied for table x'), true],
    ['a missing table', databaseError('42P01', 'relation "x" does not exist'), true],
    ['a missing column', databaseError('42703', 'column "y" does not exist'), true],
    ['a missing function', databaseError('42883', 'function f() does not exist'), true],
    ['a serialization failure', databaseError('40001', 'could not serialize'), false],
    ['an aborted transaction', databaseError('25P02', 'current transaction is aborted'), false],
    ['a unique violation', databaseError('23505', 'duplicate key'), false],
    ['the fence lost', databaseError('22012', 'division by zero'), false],
    ['an error of no database', new Error('permission denied'), false],
  ])('%s: permanent %p', (_name, error, permanent) => {
    const answer = ownStatementFailure(error);
    expect(answer instanceof PermanentDatabaseError).toBe(permanent);
    if (answer) {
      expect(answer.code).toBe('database_permanent');
      expect(answer.cause).toBe(error);
      expect(answer.explanation).toContain((error as DatabaseError).code);
      expect(answer.explanation).toContain('role');
    }
  });
});
