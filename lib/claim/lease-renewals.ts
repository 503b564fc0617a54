import { type Logger } from '@nestjs/common';
import { type ActiveClaim } from '../shapes/active-claim.js';
import {
  type ClaimStore,
  isTransactional,
  type TransactionalClaimStore,
} from '../shapes/claim-store.interface.js';
import { type StoreTransaction } from '../shapes/store-transaction.js';
import { isTransactionAbortedError } from '../connection/connection-errors.js';
import { stillRunningAfter } from '../connection/read-timeout.js';
import { releaseRetryDelay } from './release-retry.js';

/** A phase's transaction the claim's heartbeat follows while it is open (`followedBy`). */
interface FollowedPhase {
  transaction: StoreTransaction;
  /** Settles once the phase's transaction has committed or rolled back. */
  over: Promise<void>;
}

/** What a running heartbeat lets a phase of its claim hand it. */
interface Heartbeat {
  landed(): Promise<unknown>;
  /** The renewal a `BEGIN` above READ COMMITTED carries (see `holdAtBegin`), if the store has one. */
  hold?: (literal: (value: string) => string) => string;
  phase?: FollowedPhase;
  /** Stops it now (see `LeaseRenewals.stop`). */
  stop?: () => void;
}

/**
 * The running heartbeats, by claim: a phase's transaction is opened by the claim store
 * (`commitPhase`), which knows the claim but not the interceptor's `LeaseRenewals`.
 */
const heartbeats = new WeakMap<ActiveClaim, Heartbeat>();

/**
 * The claim's heartbeat (if it has one) treats `transaction`, a phase's, as it treats the
 * request's: above READ COMMITTED its `BEGIN` waits for the renewal on its way, and renewals
 * then run inside it, so the key's row does not change under its snapshot and its fenced
 * recovery-point update serializes. While it commits, a renewal waits for its end (the
 * update it commits with renews the lease). Returns the end of it, once the phase is over.
 */
export function followedBy(claim: ActiveClaim, transaction: StoreTransaction): () => void {
  const heartbeat = heartbeats.get(claim);
  if (!heartbeat) return () => undefined;
  transaction.beforeIsolatedBegin = heartbeat.landed;
  transaction.holdAtBegin = heartbeat.hold;
  let end!: () => void;
  const phase: FollowedPhase = { transaction, over: new Promise<void>((r) => (end = r)) };
  // One at a time: phases run one after the other (two at once above READ COMMITTED would
  // fail each other's recovery-point update anyway); a later one takes the heartbeat over.
  heartbeat.phase = phase;
  return () => {
    if (heartbeat.phase === phase) heartbeat.phase = undefined;
    end();
  };
}

/** Where a heartbeat's renewal goes (see `renewalRoute`). */
export type RenewalRoute = 'after-phase' | 'inside' | 'apart';

/**
 * Where a renewal goes: inside the transaction that holds the claim (a phase's, else the
 * request's) once it began above READ COMMITTED, since one committed apart after its snapshot
 * would make its fenced update fail to serialize; after a phase whose commit is under way (a
 * renewal committed apart could still land between its snapshot and its fenced update, and
 * that update renews the lease itself); else apart, on a connection of its own.
 */
export function renewalRoute(state: {
  /** A phase's transaction is committing or rolling back. */
  phaseEnding: boolean;
  /**
   * The holding transaction began above READ COMMITTED, or holds the claim uncommitted
   * (`RequestTransaction.renewsInside`), and has not ended.
   */
  holderIsolated: boolean;
  /** The store can renew inside a transaction (`extendLeaseIn`). */
  storeRenewsInside: boolean;
}): RenewalRoute {
  if (state.phaseEnding) return 'after-phase';
  return state.holderIsolated && state.storeRenewsInside ? 'inside' : 'apart';
}

/**
 * What a heartbeat does after a renewal inside the holding transaction failed with `error`.
 * Aborted (a serialization failure: another worker took the key over after its snapshot), the
 * transaction can only roll back, and every later renewal inside it would fail alike: it stops
 * (said once). It goes on when the renewal left the transaction as it was:
 * - queued behind a statement of its code's that failed in a savepoint of its own (a try with
 *   a fallback: "transaction is aborted"): the code rolls back to it and goes on;
 * - given up on by node-postgres' read timeout (a Pool's `query_timeout`, the renewal queued
 *   behind a statement its code gave up on: `stillRunningAfter`): taken off the client's
 *   queue, it never ran; or, sent, it runs on and lands. A renewal that never ran did not
 *   extend the lease, but nothing can take the key over meanwhile: a renewal goes inside only
 *   while the transaction holds the key's row (its claim uncommitted, or renewed in its
 *   `BEGIN`), and the next tick renews. Stopped, the heartbeat left the transaction's idle
 *   bound (`idleBound`, the lease) to end a live worker's session once its code worked a lease
 *   without a statement: 503 on every try (adversary 83). It cannot be sent with no read
 *   timeout instead: a per-query `query_timeout` of 0 falls back to the client's.
 */
export function afterFailedRenewalInside(error: unknown): 'go-on' | 'stop' {
  return isTransactionAbortedError(error) || stillRunningAfter(error) ? 'go-on' : 'stop';
}

/** Why a claim's heartbeat is stopped (see `heartbeatStop`). */
export type HeartbeatEnd =
  /** Its code settled (a handler, a resolver, a job, a tick): its end is sent next. */
  | 'settled'
  /** Its key is given back (`LeaseRenewals.release`). */
  | 'released';

/**
 * When a claim's heartbeat stops. Settled, it goes on until the statements its code left
 * running on the transaction's connection are done, when its transaction tracks them: one
 * given up on (Kysely's default `'ignore query'` abort) or left unawaited runs to its end, and
 * the stored answer and `COMMIT` (or the `ROLLBACK`) are sent behind it. That wait is the
 * code's time: a lease left to run out during it would let a retry, a stalled job's next
 * worker or another replica's tick take the key over and run the work a second time while the
 * first commit is still coming (adversary 81). Released, it stops now: a renewal landing after
 * the release would hold the key again, and its retry would get 409 until the lease ran out.
 */
export function heartbeatStop(
  end: HeartbeatEnd,
  tracksCodeStatements: boolean,
): 'now' | 'after-code-statements' {
  if (end === 'released') return 'now';
  return tracksCodeStatements ? 'after-code-statements' : 'now';
}

/**
 * The heartbeats of the claims this process holds, and the release that waits for them. Each
 * claim's lease renewal on its way is kept: a release waits for it, or a renewal that lands
 * after the key was given back would hold it again, and the retry would get 409s.
 */
export class LeaseRenewals {
  private readonly renewals = new WeakMap<ActiveClaim, Promise<unknown>>();

  constructor(private readonly logger: Logger) {}

  /**
   * Extends the lease while the handler runs, so that a short lease (a fast takeover after a
   * real crash) does not hand a slow but live worker's key to another one. Returns the stop for
   * when its code settled, which takes effect once the statements that code left running on
   * `transaction` are done (see `heartbeatStop`); the release of the key (`release`, `stop`)
   * stops it at once.
   */
  heartbeat(store: ClaimStore, claim: ActiveClaim, transaction?: StoreTransaction): () => void {
    const hold =
      isTransactional(store) && store.holdLeaseText
        ? (literal: (value: string) => string) => store.holdLeaseText!(claim, literal)
        : undefined;
    const heartbeat: Heartbeat = { landed: () => this.landed(claim), hold };
    heartbeats.set(claim, heartbeat);
    // A transaction above READ COMMITTED begins only once the renewal on its way has landed,
    // renews the lease in its BEGIN's round trip (the key's row locked by the transaction
    // itself, whatever its savepoints do), and then takes the renewals in (see
    // `RequestTransaction.beforeIsolatedBegin`); so does a phase's (`followedBy`).
    if (transaction) {
      transaction.beforeIsolatedBegin = heartbeat.landed;
      transaction.holdAtBegin = hold;
    }
    const renew = (): Promise<boolean> => {
      const phase = heartbeat.phase;
      const holder = phase?.transaction ?? transaction;
      const route = renewalRoute({
        phaseEnding: phase?.transaction.ended ?? false,
        holderIsolated: holder?.renewsInside ?? false,
        storeRenewsInside: isTransactional(store) && store.extendLeaseIn !== undefined,
      });
      if (route === 'after-phase') return phase!.over.then(renew);
      if (route === 'apart') return store.extendLease(claim);
      // Inside a read-only part of its code's (a nested READ ONLY report), an UPDATE would be
      // refused and abort the transaction: this tick renews nothing. The transaction has held
      // the key's row since its BEGIN, so no takeover passes meanwhile; the next tick renews.
      // A claim not committed yet is kept alive all the same: its transaction's idle bound
      // (`idleBound`, the lease) would end a live worker's session.
      if (holder!.readOnlyNow) {
        if (!holder!.holdsClaim) return Promise.resolve(true);
        return holder!.query('SELECT 1', []).then(
          () => true,
          (error: unknown) => {
            if (afterFailedRenewalInside(error) === 'go-on') return true;
            throw error;
          },
        );
      }
      return (store as TransactionalClaimStore).extendLeaseIn!(claim, holder!).catch(
        (error: unknown) => {
          // Left the transaction as it was: the next tick renews (see the function).
          if (afterFailedRenewalInside(error) === 'go-on') return true;
          // Aborted it: said once, then stopped.
          clearInterval(timer);
          throw error;
        },
      );
    };
    const timer = setInterval(
      () => {
        const renewal = renew().then(
          (held) => {
            if (!held) clearInterval(timer);
          },
          (error: unknown) =>
            this.logger.warn(`heartbeat of key ${claim.key} failed: ${String(error)}`),
        );
        this.renewals.set(claim, renewal);
      },
      Math.max(50, Math.floor(claim.leaseMs / 3)),
    );
    timer.unref();
    const stopNow = () => {
      clearInterval(timer);
      if (heartbeats.get(claim) === heartbeat) heartbeats.delete(claim);
    };
    heartbeat.stop = stopNow;
    return () => {
      const tracks = transaction?.afterCodeStatements !== undefined;
      if (heartbeatStop('settled', tracks) === 'now') stopNow();
      else transaction!.afterCodeStatements!(stopNow);
    };
  }

  /**
   * Stops the claim's heartbeat now, if it runs: its key is being given back, or its run given
   * up (see `heartbeatStop`).
   */
  stop(claim: ActiveClaim): void {
    heartbeats.get(claim)?.stop?.();
  }

  /** Once the claim's renewal on its way (if any) has landed. */
  landed(claim: ActiveClaim): Promise<unknown> {
    return this.renewals.get(claim) ?? Promise.resolve();
  }

  /**
   * Gives the key back once its renewal on its way has landed; a connection found dead is
   * tried again (see `releaseRetryDelay`), and a failure is only logged.
   */
  async release(store: ClaimStore, claim: ActiveClaim, forget: boolean): Promise<void> {
    // Stopped now, whatever its code's statements do (`heartbeatStop`): no renewal follows.
    this.stop(claim);
    await this.renewals.get(claim);
    for (let attempt = 1; ; attempt += 1) {
      const started = Date.now();
      try {
        return await store.release(claim, forget);
      } catch (error) {
        const delay = releaseRetryDelay({ attempt, tookMs: Date.now() - started, error });
        if (delay === undefined) {
          // The lease then simply runs out, and a retry takes the key over.
          this.logger.warn(`could not release key ${claim.key}: ${String(error)}`);
          return;
        }
        await new Promise((resolve) => setTimeout(resolve, delay));
      }
    }
  }
}
