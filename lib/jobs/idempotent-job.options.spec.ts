import { InvalidIdempotencyOptionsError } from '../idempotency-options.js';
import { namespaceProblem, resolveJobOptions } from './idempotent-job.options.js';

describe('namespaceProblem', () => {
  it.each([
    ['a service’s name', 'billing', undefined],
    ['one character', 'b', undefined],
    ['100 characters', 'n'.repeat(100), undefined],
    ['a dash, a dot, a slash', 'svc-a.eu/1', undefined],
    ['empty', '', 'must be 1 to 100 characters'],
    ['101 characters', 'n'.repeat(101), 'must be 1 to 100 characters'],
    ['100 emoji (200 code units)', '📦'.repeat(100), undefined],
    ['101 emoji', '📦'.repeat(101), 'must be 1 to 100 characters'],
    ['a colon', 'svc:a', 'must not hold ":" (it ends the namespace in the tenant)'],
    ['a NUL', 'svc\u0000', 'must not hold control characters'],
    ['a lone surrogate', 'svc\ud800', 'must be well-formed Unicode'],
    ['a number', 7, 'must be a string'],
  ])('%s', (_name, namespace, problem) => {
    expect(namespaceProblem(namespace)).toBe(problem);
  });
});

describe('resolveJobOptions: namespace', () => {
  it('keeps a namespace', () => {
    expect(resolveJobOptions({ namespace: 'billing' }, 'Mailer.process').namespace).toBe('billing');
  });

  it('refuses one that is not, naming the processor', () => {
    expect(() => resolveJobOptions({ namespace: 'a:b' }, 'Mailer.process')).toThrow(
      new InvalidIdempotencyOptionsError(
        '@IdempotentJob() on Mailer.process: namespace must not hold ":" (it ends the namespace in the tenant)',
      ),
    );
  });
});
