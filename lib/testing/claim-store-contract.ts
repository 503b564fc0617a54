import { randomBytes } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { decide, type ExistingKey } from '../decisions/decide.js';
import { type ActiveClaim } from '../shapes/active-claim.js';
import { type ClaimStore, type KeyScope } from '../shapes/claim-store.interface.js';
import { type StoredResponse } from '../shapes/stored-response.js';

/** What the contract needs to make a store to test. */
export interface ClaimStoreHarness {
  /**
   * A store whose finished keys are purged (or expire) `retentionMs` after they finished, and
   * whose unfinished keys are kept far longer. It may be shared by every case: each case uses
   * keys of its own.
   */
  create(settings: { retentionMs: number }): Promise<ClaimStore> | ClaimStore;
  /** Called after each case with the store `create` gave it. */
  dispose?(store: ClaimStore): Promise<void> | void;
  /**
   * How long past its retention a finished key may still be there, purges run: 0 for a store
   * that drops each key on time. A store that expires keys by whole partitions keeps some a
   * while longer (never less than the retention), and says how much here.
   * @default 0
   */
  expiryLagMs?: number;
  /**
   * How often a case is run while its timing proves nothing: a machine so loaded that a step
   * came too late for the check to mean anything throws `ClaimStoreContractTimingError` once
   * this many runs did so. A broken rule fails at once, never run again.
   * @default 3
   */
  attempts?: number;
}

/** One rule of the contract, runnable on its own: it throws, naming the rule, when broken. */
export interface ClaimStoreContractCase {
  /** The rule, in a few words: the test's name. */
  name: string;
  run(harness: ClaimStoreHarness): Promise<void>;
}

/**
 * The retention every case's store is made with: short, so that expiry is seen in a test, and
 * long enough that a loaded machine's pauses stay well inside its margins.
 */
export const CONTRACT_RETENTION_MS = 1000;
const SHORT_LEASE_MS = 150;
const LONG_LEASE_MS = 60_000;
/**
 * The heartbeat case's lease (doubled on each run again): renewed 600 ms in and checked 50 ms
 * past it, so that a loaded machine may be some 350 ms late at either step (the check's own
 * claim included) before the check proves nothing.
 */
const HEARTBEAT_LEASE_MS = 1000;

/** A broken rule: the message says which promise of the contract the store did not keep. */
export class ClaimStoreContractError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ClaimStoreContractError';
  }
}

/**
 * A case that proves nothing this time: the machine paused it past a lease or a retention its
 * check depends on (a timer that fired hundreds of milliseconds late, a purge slower than the
 * retention), so what it saw may be the store keeping its promise late, not breaking it. The
 * message gives the times measured. Not a broken rule: run the case again on a quieter machine.
 */
export class ClaimStoreContractTimingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'ClaimStoreContractTimingError';
  }
}

function check(condition: unknown, message: string): asserts condition {
  if (!condition) throw new ClaimStoreContractError(message);
}

/** Before blaming the store for what it was seen doing: whether the timing let it be seen. */
function timely(condition: boolean, message: string): void {
  if (!condition) {
    throw new ClaimStoreContractTimingError(
      `${message}: the machine was too loaded for the case to prove anything (not a broken rule)`,
    );
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits until `performance.now()` reaches `at`: a deadline that earlier delays do not push. */
const sleepUntil = (at: number) => sleep(Math.max(0, at - performance.now()));

const ms = (duration: number) => Math.round(duration);

/** A key no other case (nor another run on a shared store) uses. */
function uniqueKey(label: string): string {
  return `${label}-${randomBytes(6).toString('hex')}`;
}

function scopeOf(label: string, tenantId = 'contract'): KeyScope {
  return { tenantId, key: uniqueKey(label) };
}

const fingerprint = (seed: number) => Buffer.alloc(32, seed);

function responseOf(body: string, status = 201): StoredResponse {
  return {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', location: '/things/1' },
    body: Buffer.from(body),
  };
}

async function claimed(store: ClaimStore, scope: KeyScope, leaseMs = LONG_LEASE_MS) {
  const outcome = await store.claim(scope, fingerprint(1), leaseMs);
  check(
    outcome.kind === 'claimed',
    `a first claim of key "${scope.key}" must own it, got an existing record`,
  );
  return outcome.claim;
}

async function existing(store: ClaimStore, scope: KeyScope): Promise<ExistingKey> {
  const outcome = await store.claim(scope, fingerprint(1), LONG_LEASE_MS);
  check(
    outcome.kind === 'existing',
    `key "${scope.key}" must still be held, but a new claim owned it`,
  );
  return outcome.existing;
}

/** Claims with a short lease and waits it out: the record of a crashed worker. */
async function expired(store: ClaimStore, scope: KeyScope): Promise<ActiveClaim> {
  const claim = await claimed(store, scope, SHORT_LEASE_MS);
  await sleep(SHORT_LEASE_MS * 2);
  return claim;
}

async function takeOver(store: ClaimStore, scope: KeyScope): Promise<ActiveClaim> {
  const found = await existing(store, scope);
  const decision = decide(found, fingerprint(1));
  check(decision.kind === 'take-over', `an expired lease must be taken over, got ${decision.kind}`);
  const claim = await store.takeOver(scope, decision.fence, LONG_LEASE_MS);
  check(claim, 'the only worker taking an expired lease over must win it');
  return claim;
}

/**
 * A claim of a key of its own, forgotten at once: whatever a store makes ready for its claims
 * (partitions ahead, say) is made now, not inside a timed claim that follows.
 */
async function warmUp(store: ClaimStore): Promise<void> {
  await store.release(await claimed(store, scopeOf('warm-up')), true);
}

function sameResponse(actual: StoredResponse, expected: StoredResponse): boolean {
  return (
    actual.status === expected.status &&
    actual.body.equals(expected.body) &&
    JSON.stringify(Object.entries(actual.headers).sort()) ===
      JSON.stringify(Object.entries(expected.headers).sort())
  );
}

/** Pairs of scopes that a store must keep apart: each must be claimable on its own. */
function distinctPairs(): [string, KeyScope, KeyScope][] {
  const base = uniqueKey('apart');
  const long = `${base}-${'x'.repeat(255 - base.length - 3)}`;
  const tenant = uniqueKey('tenant');
  return [
    [
      'keys differing in case',
      { tenantId: tenant, key: `${base}-Key` },
      { tenantId: tenant, key: `${base}-key` },
    ],
    [
      'keys differing in their last character after 253 shared ones',
      { tenantId: tenant, key: `${long}-a` },
      { tenantId: tenant, key: `${long}-b` },
    ],
    [
      'tenants in two Unicode normalization forms (NFC and NFD of "café")',
      { tenantId: `${tenant}-caf\u00e9`, key: base },
      { tenantId: `${tenant}-cafe\u0301`, key: base },
    ],
    [
      'keys in two Unicode normalization forms',
      { tenantId: tenant, key: `${base}-caf\u00e9` },
      { tenantId: tenant, key: `${base}-cafe\u0301` },
    ],
    [
      'one key of two tenants',
      { tenantId: `${tenant}-1`, key: base },
      { tenantId: `${tenant}-2`, key: base },
    ],
    [
      'tenant and key split differently',
      { tenantId: `${tenant}-a`, key: `b-${base}` },
      { tenantId: `${tenant}-a-b`, key: base },
    ],
  ];
}

/**
 * The contract every claim store keeps, as cases that run on their own (each case's `run`)
 * or as a suite of a test runner (`describeClaimStoreContract`). Timing is real: leases of
 * 150 ms and 1 s and a retention of 1 s are waited out. A case whose check a loaded machine
 * delayed past what it proves throws `ClaimStoreContractTimingError`, not a broken rule.
 */
export function claimStoreContract(): ClaimStoreContractCase[] {
  return [
    {
      name: 'one of 20 concurrent claims of a key owns it',
      run: withStore(async (store) => {
        const scope = scopeOf('race');
        const outcomes = await Promise.all(
          Array.from({ length: 20 }, () => store.claim(scope, fingerprint(1), LONG_LEASE_MS)),
        );
        const owners = outcomes.filter((outcome) => outcome.kind === 'claimed').length;
        check(owners === 1, `20 concurrent claims of one key: ${owners} owned it, not 1`);
        for (const outcome of outcomes) {
          if (outcome.kind !== 'existing') continue;
          check(
            outcome.existing.state === 'started' && !outcome.existing.leaseExpired,
            "a claim that lost the race must see the winner's live lease",
          );
        }
      }),
    },
    {
      name: 'a finished key gives back its fingerprint and response, byte for byte',
      run: withStore(async (store) => {
        const scope = scopeOf('replay');
        const claim = await claimed(store, scope);
        const response = responseOf('{"id":1,"note":"\u00e9\u0000\u00ff"}');
        check(await store.finish(claim, response), 'the owner of a live lease must finish it');
        const found = await existing(store, scope);
        check(found.state === 'done', 'a finished key must be found done');
        check(found.fingerprint.equals(fingerprint(1)), 'the fingerprint must come back unchanged');
        check(
          sameResponse(found.response, response),
          'the stored response must come back unchanged',
        );
        check(
          (found.finishedAgeMs ?? 0) < CONTRACT_RETENTION_MS,
          `a key finished just now must say so (finishedAgeMs ${found.finishedAgeMs})`,
        );
        const mismatch = await store.claim(scope, fingerprint(2), LONG_LEASE_MS);
        check(
          mismatch.kind === 'existing' &&
            decide(mismatch.existing, fingerprint(2)).kind === 'mismatch',
          'a claim with another fingerprint must find the record (and mismatch), not own the key',
        );
      }),
    },
    {
      name: 'keys that differ in any way stay apart (case, Unicode form, long prefixes, tenants)',
      run: withStore(async (store) => {
        for (const [what, first, second] of distinctPairs()) {
          const a = await store.claim(first, fingerprint(1), LONG_LEASE_MS);
          const b = await store.claim(second, fingerprint(2), LONG_LEASE_MS);
          check(
            a.kind === 'claimed' && b.kind === 'claimed',
            `${what} must be two keys, but the second claim found the first's record`,
          );
          check(await store.finish(b.claim, responseOf('"second"')), `${what}: finish`);
          const back = await existing(store, first);
          check(
            back.state === 'started' && back.fingerprint.equals(fingerprint(1)),
            `${what}: finishing the second changed the first`,
          );
        }
      }),
    },
    {
      name: 'a live lease is not taken over',
      run: withStore(async (store) => {
        const scope = scopeOf('live');
        await claimed(store, scope);
        const found = await existing(store, scope);
        check(found.state === 'started', 'an unfinished key must be found started');
        check(!found.leaseExpired, 'a lease of 60 s must not be expired at once');
        check(
          found.leaseSecondsLeft >= 1 && found.leaseSecondsLeft <= 60,
          `leaseSecondsLeft must be within the lease (got ${found.leaseSecondsLeft})`,
        );
        const won = await store.takeOver(scope, found.fence, LONG_LEASE_MS);
        check(won === undefined, 'a takeover of a live lease must fail');
      }),
    },
    {
      name: 'an expired lease is taken over by exactly one of 10 workers, with the same claim id',
      run: withStore(async (store) => {
        const scope = scopeOf('takeover');
        const first = await expired(store, scope);
        const found = await existing(store, scope);
        check(found.state === 'started' && found.leaseExpired, 'the lease must have expired');
        const won = (
          await Promise.all(
            Array.from({ length: 10 }, () => store.takeOver(scope, found.fence, LONG_LEASE_MS)),
          )
        ).filter((claim) => claim !== undefined);
        check(won.length === 1, `10 concurrent takeovers: ${won.length} won, not 1`);
        check(won[0].claimId === first.claimId, 'a takeover must keep the claim id');
        check(won[0].lockVersion !== first.lockVersion, 'a takeover must move the fencing token');
      }),
    },
    {
      name: 'a stale owner is fenced off: its finish, heartbeat and release do nothing',
      run: withStore(async (store) => {
        const scope = scopeOf('stale');
        const stale = await expired(store, scope);
        const owner = await takeOver(store, scope);
        check(
          !(await store.finish(stale, responseOf('"stale"'))),
          'a stale owner finished the key',
        );
        check(!(await store.extendLease(stale)), 'a stale owner extended the lease');
        await store.release(stale, true);
        await store.release(stale, false);
        const found = await existing(store, scope);
        check(
          found.state === 'started' && !found.leaseExpired,
          "a stale owner's release ended the new owner's lease",
        );
        check(await store.finish(owner, responseOf('"owner"')), 'the owner must still finish');
        const done = await existing(store, scope);
        check(
          done.state === 'done' && done.response.body.toString() === '"owner"',
          "the stored response must be the owner's",
        );
      }),
    },
    {
      name: 'a finished key, and a stale or forged fence, are never taken over',
      run: withStore(async (store) => {
        // A slow owner's lease ran out; a worker read the fence; then the owner finished.
        const finished = scopeOf('finished');
        const slow = await expired(store, finished);
        const seen = await existing(store, finished);
        check(seen.state === 'started' && seen.leaseExpired, 'the lease must have expired');
        check(
          await store.finish(slow, responseOf('"slow"')),
          'an owner whose lease ran out, and that nobody took over, must still finish',
        );
        check(
          (await store.takeOver(finished, seen.fence, LONG_LEASE_MS)) === undefined,
          'a finished key was taken over: its handler would run twice',
        );

        // A fence read before the key was forgotten and claimed anew.
        const reclaimed = scopeOf('reclaimed');
        const first = await expired(store, reclaimed);
        const old = await existing(store, reclaimed);
        check(old.state === 'started', 'the first claim must be found');
        await store.release(first, true);
        await claimed(store, reclaimed, SHORT_LEASE_MS);
        await sleep(SHORT_LEASE_MS * 2);
        const now = await existing(store, reclaimed);
        check(now.state === 'started' && now.leaseExpired, 'the second lease must have expired');
        check(
          (await store.takeOver(reclaimed, old.fence, LONG_LEASE_MS)) === undefined,
          "a takeover with a forgotten claim's fence won the new claim",
        );
        const ahead = { ...now.fence, lockVersion: String(Number(now.fence.lockVersion) + 1) };
        check(
          (await store.takeOver(reclaimed, ahead, LONG_LEASE_MS)) === undefined,
          'a takeover with a lock version the record does not have won it',
        );
        check(
          (await store.takeOver(reclaimed, now.fence, LONG_LEASE_MS)) !== undefined,
          'the takeover with the current fence must win',
        );
      }),
    },
    {
      name: 'only the owner finishes, and only once',
      run: withStore(async (store) => {
        const scope = scopeOf('owner');
        const claim = await claimed(store, scope);
        // Claim ids are the store's own tokens: a forged one is another claim's.
        const other = await claimed(store, scopeOf('other'));
        const forged = [
          { ...claim, claimId: other.claimId },
          { ...claim, lockVersion: String(Number(claim.lockVersion) + 1) },
          { ...claim, tenantId: `${claim.tenantId}-other` },
        ];
        for (const other of forged) {
          check(
            !(await store.finish(other, responseOf('"forged"'))),
            'a forged fence finished the key',
          );
        }
        check(await store.finish(claim, responseOf('"first"')), 'the owner must finish');
        check(!(await store.finish(claim, responseOf('"again"'))), 'a key must finish only once');
        // A finished key is no one's to give back: its owner's late release changes nothing.
        await store.release(claim, true);
        await store.release(claim, false);
        const done = await existing(store, scope);
        check(
          done.state === 'done' && done.response.body.toString() === '"first"',
          "the first finish must be the stored one, kept through its owner's late release",
        );
      }),
    },
    {
      name: 'a finished answer is completed by its own claim only, once finished (completeAnswer)',
      run: withStore(async (store) => {
        // Optional: a store without it leaves a GraphQL answer's middleware outputs unstored.
        if (!store.completeAnswer) return;
        const scope = scopeOf('complete');
        const claim = await claimed(store, scope);
        check(
          !(await store.completeAnswer(claim, responseOf('"early"'))),
          'a key not finished yet must not be completed',
        );
        check(await store.finish(claim, responseOf('"pending"')), 'the owner must finish');
        const forged = [
          { ...claim, claimId: (await claimed(store, scopeOf('complete-other'))).claimId },
          { ...claim, lockVersion: String(Number(claim.lockVersion) + 1) },
          { ...claim, tenantId: `${claim.tenantId}-other` },
        ];
        for (const other of forged) {
          check(
            !(await store.completeAnswer(other, responseOf('"forged"'))),
            'a forged fence completed the answer',
          );
        }
        const completed = responseOf('{"outputs":{"members":[]}}');
        check(await store.completeAnswer(claim, completed), 'its own claim must complete it');
        const done = await existing(store, scope);
        check(
          done.state === 'done' && sameResponse(done.response, completed),
          'the completed answer must be the one replayed',
        );
      }),
    },
    {
      name: 'a released first claim is forgotten; a kept one is taken over with its claim id',
      run: withStore(async (store) => {
        const forgotten = scopeOf('forget');
        const first = await claimed(store, forgotten);
        await store.release(first, true);
        const again = await claimed(store, forgotten);
        check(again.claimId !== first.claimId, 'a claim after a forget must be a new claim');

        const kept = scopeOf('keep');
        const claim = await claimed(store, kept);
        await store.release(claim, false);
        // A heartbeat tick still on its way after the release must not lease it again.
        await store.extendLease(claim);
        const found = await existing(store, kept);
        check(
          found.state === 'started' && found.leaseExpired,
          'a release must end the lease, and a heartbeat after it must not lease it again',
        );
        check(
          found.state === 'started' && found.released !== false,
          'a released key must not be reported as a lease that ran out (released: false)',
        );
        const resumed = await takeOver(store, kept);
        check(resumed.claimId === claim.claimId, 'a released key must resume with its claim id');
        // Taken over: its derived keys may have reached another system, so it is never forgotten.
        await store.release(resumed, true);
        const still = await existing(store, kept);
        check(still.state === 'started', 'a taken-over claim must not be forgotten');
      }),
    },
    {
      name: 'a heartbeat keeps a lease past its first term',
      run: withStore(async (store, { attempt }) => {
        const scope = scopeOf('heartbeat');
        // Longer on each run again: a machine that delayed a step too long once may again.
        const lease = HEARTBEAT_LEASE_MS * 2 ** attempt;
        // The lease begins somewhere within the timed claim: a short one keeps that window small.
        await warmUp(store);
        const claiming = performance.now();
        const claim = await claimed(store, scope, lease);
        // The lease began between these two: it ends by claimedAt + lease at the latest.
        const claimedAt = performance.now();
        await sleepUntil(claimedAt + lease * 0.6);
        const extending = performance.now();
        const extended = await store.extendLease(claim);
        const extendedAt = performance.now();
        // A store may refuse to renew a lease that ran out: only a heartbeat sent while the
        // first term surely lasted must be taken.
        const extendLate =
          `the heartbeat ended ${ms(extendedAt - claiming)} ms after the claim began, ` +
          `past its ${lease} ms lease`;
        if (!extended) timely(extendedAt - claiming < lease, extendLate);
        check(extended, 'the owner must extend its lease');
        // Past the first term, whenever in its window the store began it.
        await sleepUntil(claimedAt + lease + 50);
        const found = await existing(store, scope);
        const checkedAt = performance.now();
        if (found.state === 'started' && !found.leaseExpired) return;
        timely(extendedAt - claiming < lease, extendLate);
        timely(
          checkedAt - extending < lease,
          `the check ended ${ms(checkedAt - extending)} ms after the heartbeat began, ` +
            `past the ${lease} ms it renewed`,
        );
        throw new ClaimStoreContractError(
          `a ${lease} ms lease renewed ${ms(extending - claimedAt)} ms in must still be live ` +
            `${ms(checkedAt - claimedAt)} ms in (past its first term, within the renewal)`,
        );
      }),
    },
    {
      name: 'a finished key expires after the retention, an unfinished one does not',
      run: withStore(async (store, { expiryLagMs }) => {
        const retention = CONTRACT_RETENTION_MS;
        const done = scopeOf('retention');
        const unfinished = scopeOf('unfinished');
        await claimed(store, unfinished, SHORT_LEASE_MS);
        const claim = await claimed(store, done);
        const claimedAt = performance.now();
        // A purge while the key is unfinished, untimed: it must keep the key whenever it ends,
        // and it takes what earlier cases left past the retention out of the timed purge (a
        // store that expires by partitions, one at a time, may take long over them).
        await sleepUntil(claimedAt + retention * 0.9);
        await store.purgeBatch(retention, 1000);
        // Finished well after its claim: the window counts from the finish.
        const finishing = performance.now();
        check(await store.finish(claim, responseOf('"kept"')), 'finish');
        const finishedAt = performance.now();
        // Past the retention counted from the claim, by enough that a store expiring by
        // partitions drops the claim's; within the one counted from the finish.
        await sleepUntil(claimedAt + retention * 1.2);
        await store.purgeBatch(retention, 1000);
        const purgedAt = performance.now();
        const kept = await store.claim(done, fingerprint(1), LONG_LEASE_MS);
        if (kept.kind === 'claimed') {
          timely(
            purgedAt - finishing < retention,
            `the purge ended ${ms(purgedAt - finishing)} ms after the finish began, past the ` +
              `${retention} ms retention: the key may have expired in its own time`,
          );
        }
        check(
          kept.kind === 'existing' && kept.existing.state === 'done',
          'a key was purged within its retention (counted from its claim, not its finish?)',
        );
        // Late is never too late here: a key is only more surely gone.
        await sleepUntil(finishedAt + retention + expiryLagMs + 300);
        await store.purgeBatch(retention, 1000);
        const after = await store.claim(done, fingerprint(1), LONG_LEASE_MS);
        check(after.kind === 'claimed', 'a finished key must be gone once its retention passed');
        check(
          (await existing(store, unfinished)).state === 'started',
          'an unfinished key must outlive the retention (it holds the claim id of its calls)',
        );
      }),
    },
  ];
}

/** How often a case is run while its timing proves nothing, unless the harness says. */
const ATTEMPTS = 3;

/** What a case is given to run with. */
interface CaseContext {
  expiryLagMs: number;
  /** How many runs of the case before this one proved nothing (0 on the first). */
  attempt: number;
}

/**
 * Gives each case a store of its own making, and disposes of it after; runs it again, on a
 * store of its own, while its timing proved nothing.
 */
function withStore(run: (store: ClaimStore, context: CaseContext) => Promise<void>) {
  return async (harness: ClaimStoreHarness) => {
    const attempts = harness.attempts ?? ATTEMPTS;
    if (!Number.isInteger(attempts) || attempts < 1) {
      throw new Error(
        `the contract's harness: attempts must be a whole number of at least 1 (got ${attempts})`,
      );
    }
    for (let attempt = 0; ; attempt++) {
      const store = await harness.create({ retentionMs: CONTRACT_RETENTION_MS });
      try {
        return await run(store, { expiryLagMs: harness.expiryLagMs ?? 0, attempt });
      } catch (error) {
        if (!(error instanceof ClaimStoreContractTimingError)) throw error;
        if (attempt + 1 < attempts) continue;
        throw attempts === 1
          ? error
          : new ClaimStoreContractTimingError(
              `${attempts} runs proved nothing; the last: ${error.message}`,
            );
      } finally {
        await harness.dispose?.(store);
      }
    }
  };
}

interface TestRunner {
  describe(name: string, body: () => void): void;
  it(name: string, body: () => Promise<void>, timeoutMs?: number): void;
}

/**
 * Registers the contract as a suite of the test runner in use (Jest, Vitest and Mocha alike
 * provide `describe` and `it`): one test per rule, named for it.
 *
 * @example
 * describeClaimStoreContract('my store', {
 *   create: ({ retentionMs }) => new MyClaimStore(client, { retentionMs }),
 * });
 */
export function describeClaimStoreContract(name: string, harness: ClaimStoreHarness): void {
  const runner = globalThis as unknown as Partial<TestRunner>;
  if (typeof runner.describe !== 'function' || typeof runner.it !== 'function') {
    throw new Error('describeClaimStoreContract needs a test runner with describe() and it()');
  }
  const { describe, it } = runner as TestRunner;
  describe(`claim store contract: ${name}`, () => {
    for (const rule of claimStoreContract()) it(rule.name, () => rule.run(harness), 30_000);
  });
}
