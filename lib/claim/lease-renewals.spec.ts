import { type ActiveClaim } from '../shapes/active-claim.js';
import { type ClaimStore } from '../shapes/claim-store.interface.js';
import {
  afterFailedRenewalInside,
  heartbeatStop,
  type HeartbeatEnd,
  LeaseRenewals,
  renewalRoute,
  type RenewalRoute,
} from './lease-renewals.js';
import { type RequestTransaction } from '../transaction/request-transaction.js';

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

describe('LeaseRenewals.heartbeat inside a transaction above READ COMMITTED', () => {
  const claim = {
    tenantId: 't',
    key: 'k',
    claimId: 'c',
    lockVersion: '1',
    recoveryPoint: 'start',
    phaseResults: {},
    leaseMs: 150,
  } as unknown as ActiveClaim;
  const isolated = {
    isolated: true,
    renewsInside: true,
    ended: false,
  } as unknown as RequestTransaction;

  it.each<[string, () => Promise<boolean>, (calls: number) => void, number]>([
    [
      'a renewal that fails (the transaction is then aborted): once, said once, then stopped',
      () => Promise.reject(new Error('40001 could not serialize access')),
      (calls) => expect(calls).toBe(1),
      1,
    ],
    [
      // Queued behind its code's statement that failed in a savepoint of its own (a try with a
      // fallback): the code rolls back to it and goes on, and so do the renewals.
      'renewals that meet "transaction is aborted" (25P02): every heartbeat, nothing said',
      () =>
        Promise.reject(
          Object.assign(new Error('current transaction is aborted'), {
            code: '25P02',
            severity: 'ERROR',
          }),
        ),
      (calls) => expect(calls).toBeGreaterThanOrEqual(3),
      0,
    ],
    [
      // Queued behind a statement its code gave up on through a Pool's `query_timeout`: taken
      // off the client's queue, never run (adversary 83).
      "renewals given up on by node-postgres' read timeout: every heartbeat, nothing said",
      () => Promise.reject(new Error('Query read timeout')),
      (calls) => expect(calls).toBeGreaterThanOrEqual(3),
      0,
    ],
    [
      'renewals that hold: every heartbeat, nothing said',
      () => Promise.resolve(true),
      (calls) => expect(calls).toBeGreaterThanOrEqual(3),
      0,
    ],
  ])('%s', async (_name, renewal, expectCalls, warnings) => {
    let calls = 0;
    const warned: string[] = [];
    const store = {
      transactional: true,
      extendLease: () => Promise.resolve(true),
      extendLeaseIn: () => {
        calls++;
        return renewal();
      },
      commitPhase: () => undefined,
    } as unknown as ClaimStore;
    const renewals = new LeaseRenewals({ warn: (m: string) => warned.push(m) } as never);
    const stop = renewals.heartbeat(store, claim, isolated);
    // An interval of 50 ms: three heartbeats, or 2 s (a loaded machine's timers run late;
    // a heartbeat that stops after one failure stays at one).
    for (const deadline = Date.now() + 2_000; calls < 3 && Date.now() < deadline;) {
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    stop();
    expectCalls(calls);
    expect(warned).toHaveLength(warnings);
  });

  // A claim not committed yet (`oneCommit`) in a read-only part of its code's: an UPDATE would
  // be refused, but its transaction's idle bound (the lease) would end the session: kept alive.
  it.each<[string, boolean, string[]]>([
    ['holding a claim not committed yet: kept alive with a read', true, ['SELECT 1']],
    ['its claim committed apart: nothing sent', false, []],
  ])('inside a read-only nested transaction, %s', async (_name, holdsClaim, expected) => {
    const sent = new Set<string>();
    const readOnly = {
      ...isolated,
      readOnlyNow: true,
      holdsClaim,
      query: (text: string) => {
        sent.add(text);
        return Promise.resolve([]);
      },
    } as unknown as RequestTransaction;
    const store = {
      transactional: true,
      extendLease: () => Promise.resolve(true),
      extendLeaseIn: () => Promise.reject(new Error('no renewal in a read-only transaction')),
      commitPhase: () => undefined,
    } as unknown as ClaimStore;
    const renewals = new LeaseRenewals({ warn: () => undefined } as never);
    const stop = renewals.heartbeat(store, claim, readOnly);
    await new Promise((resolve) => setTimeout(resolve, 180)); // an interval of 50 ms
    stop();
    expect([...sent]).toEqual(expected);
  });
});

describe('afterFailedRenewalInside', () => {
  it.each<[string, unknown, ReturnType<typeof afterFailedRenewalInside>]>([
    ['a serialization failure (the transaction aborted)', serverError('40001'), 'stop'],
    ['a lost connection', new Error('Connection terminated unexpectedly'), 'stop'],
    ["behind a failed statement of its code's (25P02)", serverError('25P02'), 'go-on'],
    // Adversary 83: never ran, or runs on; the transaction holds the key's row meanwhile.
    ["node-postgres' read timeout (query_timeout)", new Error('Query read timeout'), 'go-on'],
  ])('%s: %s', (_name, error, expected) => {
    expect(afterFailedRenewalInside(error)).toBe(expected);
  });
});

function serverError(code: string): Error {
  return Object.assign(new Error(`error ${code}`), { code, severity: 'ERROR' });
}

describe('heartbeatStop', () => {
  it.each<[string, HeartbeatEnd, boolean, ReturnType<typeof heartbeatStop>]>([
    [
      'its code settled, its transaction tracks its statements: once they are done',
      'settled',
      true,
      'after-code-statements',
    ],
    ['its code settled, no transaction that tracks them: now', 'settled', false, 'now'],
    ['its key given back: now, whatever still runs', 'released', true, 'now'],
    ['its key given back, nothing tracked: now', 'released', false, 'now'],
  ])('%s', (_name, end, tracks, when) => {
    expect(heartbeatStop(end, tracks)).toBe(when);
  });
});

describe('LeaseRenewals.heartbeat stopped while its code statements still run', () => {
  const claim = {
    tenantId: 't',
    key: 'k2',
    claimId: 'c',
    lockVersion: '1',
    recoveryPoint: 'start',
    phaseResults: {},
    leaseMs: 150,
  } as unknown as ActiveClaim;

  /** A transaction whose code left one statement running until `finish()`. */
  function running() {
    const waiting: (() => void)[] = [];
    let done = false;
    const transaction = {
      renewsInside: false,
      ended: false,
      afterCodeStatements: (then: () => void) => (done ? then() : waiting.push(then)),
    } as unknown as RequestTransaction;
    const finish = () => {
      done = true;
      for (const then of waiting.splice(0)) then();
    };
    return { transaction, finish };
  }

  const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

  it.each<[string, 'settled' | 'released', boolean]>([
    ['settled: renewed until the statement is done, then no more', 'settled', true],
    ['its key given back: no renewal after the release', 'released', false],
  ])('%s', async (_name, end, renewedMeanwhile) => {
    let renewals = 0;
    const store = {
      extendLease: () => {
        renewals++;
        return Promise.resolve(true);
      },
      release: () => Promise.resolve(),
    } as unknown as ClaimStore;
    const leases = new LeaseRenewals({ warn: () => undefined } as never);
    const { transaction, finish } = running();
    const stop = leases.heartbeat(store, claim, transaction);
    stop();
    if (end === 'released') await leases.release(store, claim, false);
    const before = renewals;
    await sleep(250); // an interval of 50 ms
    expect(renewals > before).toBe(renewedMeanwhile);
    finish();
    await sleep(20);
    const after = renewals;
    await sleep(200);
    expect(renewals).toBe(after);
  });
});
