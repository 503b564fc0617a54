import { isWellFormedText } from '../decisions/well-formed.js';
import { jobTenant } from './job-key.js';
import { JobQueueTenantTooLongError, JobQueueTenantUnstorableError } from './job-errors.js';

describe('JobQueueTenantTooLongError: its numbers in characters, as the CHECK counts them', () => {
  it.each([
    [
      'an ASCII name of 250',
      'q'.repeat(250),
      '257 characters',
      'may be 248 characters at most there, not 250',
    ],
    [
      '249 emoji (498 code units)',
      '📦'.repeat(249),
      '256 characters',
      'may be 248 characters at most there, not 249',
    ],
  ])('%s', (_name, queue, total, room) => {
    const tenant = jobTenant(queue);
    const message = new JobQueueTenantTooLongError('Parcels.process', tenant, queue).message;
    expect(message).toContain(`, ${total}: bullmq:`);
    expect(message).toContain(room);
    // Its preview is cut on a character's boundary: no lone surrogate in the job's reason.
    expect(isWellFormedText(message)).toBe(true);
  });
});

describe('JobQueueTenantUnstorableError', () => {
  it.each([
    ['a NUL', jobTenant('mail\u0000eu'), 'holds a NUL character', '"bullmq:mail\\u0000eu"'],
    [
      'a lone surrogate in a long name',
      jobTenant('📦'.repeat(80) + '\ud800'),
      'holds a lone surrogate (not Unicode)',
      `"bullmq:${'📦'.repeat(53)}"…`,
    ],
  ])('%s: names the tenant escaped, and the problem', (_name, tenant, problem, shown) => {
    const error = new JobQueueTenantUnstorableError('Mails.process', tenant, problem);
    expect(error.name).toBe('JobQueueTenantUnstorableError');
    expect(error.message).toContain(`its queue's tenant ${shown} (bullmq:`);
    expect(error.message).toContain(`${problem}, which PostgreSQL cannot store`);
    expect(error.message).not.toContain('\u0000');
    expect(isWellFormedText(error.message)).toBe(true);
  });
});
