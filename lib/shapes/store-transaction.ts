import { type EntityManager } from 'typeorm';

/** A store's claim statement: its parameters `$1`…`$n`, given as SQL literals (`args`). */
export interface ClaimInText {
  name: string;
  text: string;
  args: string[];
}

/** A statement of the library's own, run last in a transaction: it must touch one row. */
export interface FencedStatement {
  name: string;
  text: string;
  values: unknown[];
}

/**
 * The request's transaction as the stores see it: what a claim, a phase or a stored answer
 * does in it. `RequestTransaction` (transaction/) implements it, where each member says more;
 * the stores import this shape, never the transaction's layer, which runs on them.
 */
export interface StoreTransaction {
  /** Its code's nested transactions join it (an atomic route). */
  joinable: boolean;
  /** The key's claim is in its uncommitted work: it commits with the answer, or vanishes. */
  readonly holdsClaim: boolean;
  /** It committed or rolled back (or is doing so), as its code sees it. */
  readonly ended: boolean;
  /** Its code has a nested read-only transaction open: a renewal inside would be refused. */
  readonly readOnlyNow: boolean;
  /** It is to begin above READ COMMITTED, as far as is known before it begins. */
  readonly plannedAboveReadCommitted: boolean;
  /** The claim's lease is renewed inside it, not apart. */
  readonly renewsInside: boolean;
  /** Awaited before the `BEGIN` of a transaction above READ COMMITTED. */
  beforeIsolatedBegin?: () => Promise<unknown>;
  /** A statement the `BEGIN` above READ COMMITTED carries (the lease renewed there). */
  holdAtBegin?: (literal: (value: string) => string) => string;
  /** What an error thrown by code that ran in it means (an earlier failure it caught). */
  failureOf(error: unknown): unknown;
  /** Opens it with the key's lock and claim in the first round trip (`oneCommit`). */
  beginWithClaim(
    lock: (literal: (value: string) => string) => string,
    claim: (literal: (value: string) => string) => ClaimInText,
    waitMs: number,
    idleMs: number,
  ): Promise<Record<string, unknown>[]>;
  /**
   * Hands the claim it holds uncommitted (nothing of its code's in it yet) to `phase`, a
   * phase's transaction, which commits the claim with its work or hands it back: false when it
   * cannot (`oneCommit`: the claim with its first phase).
   */
  handClaimTo?(phase: StoreTransaction): boolean;
  /** One statement of the library's own in it: its rows. */
  query<R = Record<string, unknown>>(text: string, values: unknown[]): Promise<R[]>;
  /** TypeORM's EntityManager of it (a stand-in that says why, on a pool). */
  readonly manager: EntityManager;
  /** Runs `statement` last and commits; false (all rolled back) when it touched no row. */
  commitWith(statement: FencedStatement): Promise<boolean>;
  /** Rolls back (if a statement opened it) and gives the connection back. Never throws. */
  rollback(): Promise<void>;
  /** Runs `work` in its scope: the data layer's statements made there join it. */
  inScope<R>(work: () => Promise<R>): Promise<R>;
  /**
   * Runs `then` once its code's statements still running on its connection are done (now, if
   * none is): what its end (the stored answer, `COMMIT` or `ROLLBACK`) is sent behind. The
   * claim's heartbeat stops so (see `LeaseRenewals.heartbeat`).
   */
  afterCodeStatements?(then: () => void): void;
}
