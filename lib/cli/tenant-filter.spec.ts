import { tenantFilter } from './tenant-filter.js';

describe('tenantFilter', () => {
  it.each([
    ['a queue: that queue alone', 'bullmq:payouts', false],
    ['every queue', 'bullmq:', true],
    ['the queues under a prefix of their own', 'bullmq:acme:', true],
    ['the scheduled tasks', 'schedule:', true],
    ['one task', 'schedule:sync', false],
    ['an app tenant', 't1', false],
  ])('%s', (_name, given, prefix) => {
    expect(tenantFilter(given)).toEqual({ tenant: given, prefix });
  });
});
