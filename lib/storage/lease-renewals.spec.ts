import { renewalRoute, type RenewalRoute } from './lease-renewals.js';

describe('renewalRoute', () => {
  it.each<[string, Parameters<typeof renewalRoute>[0], RenewalRoute]>([
    [
      'no transaction above READ COMMITTED: apart',
      { phaseEnding: false, holderIsolated: false, storeRenewsInside: true },
      'apart',
    ],
    [
      'a transaction (the request’s or a phase’s) above READ COMMITTED: inside it',
      { phaseEnding: false, holderIsolated: true, storeRenewsInside: true },
      'inside',
    ],
    [
      'a store that cannot renew inside a transaction: apart',
      { phaseEnding: false, holderIsolated: true, storeRenewsInside: false },
      'apart',
    ],
    [
      'a phase committing above READ COMMITTED: after its end',
      { phaseEnding: true, holderIsolated: false, storeRenewsInside: true },
      'after-phase',
    ],
    [
      'a phase committing at READ COMMITTED: after its end too (its update renews the lease)',
      { phaseEnding: true, holderIsolated: false, storeRenewsInside: false },
      'after-phase',
    ],
  ])('%s', (_name, state, route) => {
    expect(renewalRoute(state)).toBe(route);
  });
});
