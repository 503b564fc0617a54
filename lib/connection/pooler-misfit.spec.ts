import { IdempotencyStoreMisconfiguredError } from '../shapes/idempotency.errors.js';
import { explainPoolerMisfit, misconfigured } from './pooler-misfit.js';

const ADVICE = "Set pooler: 'transaction' in IdempotencyModule.forRoot()";

describe('explainPoolerMisfit', () => {
  it.each<[string, unknown, string | undefined]>([
    [
      'a statement prepared on another server session (26000)',
      { code: '26000', message: 'prepared statement "idempotency_claim_v3" does not exist' },
      'prepared statement "idempotency_claim_v3" does not exist (SQLSTATE 26000)',
    ],
    [
      'a statement another client prepared on this server session (42P05)',
      { code: '42P05', message: 'prepared statement "idempotency_claim_v3" already exists' },
      'prepared statement "idempotency_claim_v3" already exists (SQLSTATE 42P05)',
    ],
    [
      'under TypeORM’s QueryFailedError',
      {
        message: 'wrapped',
        driverError: {
          code: '26000',
          message: 'prepared statement "idempotency_complete_v3" does not exist',
        },
      },
      'prepared statement "idempotency_complete_v3" does not exist (SQLSTATE 26000)',
    ],
    [
      'the app’s own statement (a handler’s lazy PREPARE): its failure, not a misfit',
      { code: '26000', message: 'prepared statement "report_q" does not exist' },
      undefined,
    ],
    [
      'the app’s own, prepared twice',
      { code: '42P05', message: 'prepared statement "report_q" already exists' },
      undefined,
    ],
    [
      'a cursor of the same class (26000, not a prepared statement)',
      { code: '26000', message: 'cursor "c" does not exist' },
      undefined,
    ],
    ['a connection refused', { code: 'ECONNREFUSED', message: 'connect ECONNREFUSED' }, undefined],
    ['a deadlock', { code: '40P01', message: 'deadlock detected' }, undefined],
    ['nothing', undefined, undefined],
  ])('%s', (_name, error, expected) => {
    const explanation = explainPoolerMisfit(error);
    if (expected === undefined) {
      expect(explanation).toBeUndefined();
    } else {
      expect(explanation).toContain(expected);
      expect(explanation).toContain(ADVICE);
    }
  });
});

describe('misconfigured', () => {
  it('makes the 500 store_misconfigured of a misfit, with the explanation apart from the message', () => {
    const cause = {
      code: '42P05',
      message: 'prepared statement "idempotency_claim_v5" already exists',
    };
    const error = misconfigured(cause);
    expect(error).toBeInstanceOf(IdempotencyStoreMisconfiguredError);
    expect(error?.code).toBe('store_misconfigured');
    expect(error?.cause).toBe(cause);
    expect(error?.explanation).toContain(ADVICE);
    expect(error?.message).not.toContain('pooler');
  });

  it('leaves any other failure to its caller', () => {
    expect(misconfigured(new Error('connect ECONNREFUSED'))).toBeUndefined();
  });
});
