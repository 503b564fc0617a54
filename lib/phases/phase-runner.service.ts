import { Injectable } from '@nestjs/common';
import { randomUUID } from 'node:crypto';
import { type EntityManager } from 'typeorm';
import {
  type ActiveClaim,
  currentIdempotencyContext,
  type IdempotencyContext,
} from '../transaction/idempotency-context.js';
import { classifyHandlerError, refusedAfter } from '../transaction/failure.js';
import { notePhaseWorkFailure } from './phase-work-failure.js';
import {
  TransactionAbortedError,
  TransactionControlRefusedError,
} from '../transaction/seam-errors.js';
import { RequestTransaction } from '../transaction/request-transaction.js';
import { completedPhase, derivedKey, recordablePhaseName } from './phases.js';
import { IdempotencyPhaseNameInvalidError } from '../shapes/idempotency.errors.js';
import { recordPhaseResult } from '../claim/phase-result-json.js';
import { PhaseResponse } from './phase-response.js';
import { isTransactional, type TransactionalClaimStore } from '../shapes/claim-store.interface.js';
import { IdempotencyDatabase } from '../data-layers/idempotency-database.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { type StoreTransaction } from '../shapes/store-transaction.js';
import { SEALED_MARKER } from '../answer/response-sealer.js';
import { transactionScope } from '../transaction/transaction-scope.js';

/** A phase's result as it is stored and given back to a takeover: what JSON keeps of it. */
function asStored<T>(value: T): T {
  return JSON.parse(JSON.stringify(value ?? null)) as T;
}

/** Runs an external call outside every transaction scope: it must not open one, nor join one. */
function outsideTransactions<T>(work: () => Promise<T>): Promise<T> {
  return transactionScope.exit(work);
}

/** What a phase gets besides its transaction. */
export interface PhaseContext {
  /**
   * The key to send to an external system called in this phase: derived from this claim of
   * the client's key and the phase's name. Every worker that takes the claim over sends the
   * same one, so the external system runs the call once; a later claim of the same client
   * key (after it expired and was purged) gets a new one.
   */
  idempotencyKey: string;
  /** The phase's name. */
  phase: string;
}

/** A phase's work: its database effects go through `manager`, inside the phase's transaction. */
export type PhaseWork<T> = (manager: EntityManager, context: PhaseContext) => Promise<T>;

/** An external phase's call: runs with no transaction open, with the phase's derived key. */
export type ExternalCall<R> = (context: PhaseContext) => Promise<R>;

/** An external phase's record of what the call returned, in a short transaction. */
export type CallRecord<R, T> = (manager: EntityManager, result: R) => Promise<T>;

const JSON_CONTENT_TYPE = 'application/json; charset=utf-8';

/**
 * Atomic phases (Brandur Leach's design): a handler's work split at each external call, each
 * phase's database effects committed together with the key's recovery point. A worker that
 * takes a crashed request over runs the handler again; completed phases are skipped and give
 * back their stored results, and the first unfinished phase runs.
 *
 * A singleton: it finds the current request through async context, never `Scope.REQUEST`.
 * Outside an idempotent request (a route whose key is optional, sent without one) phases run
 * as plain transactions.
 *
 * @example
 * const { chargeId } = await this.phases.run('charge_created', async (manager) => ({
 *   chargeId: (await manager.save(Charge, { amount })).id,
 * }));
 * const auth = await this.phases.run('psp_authorized', async (manager, { idempotencyKey }) => {
 *   const auth = await this.psp.authorize({ amount }, idempotencyKey);
 *   await manager.update(Charge, chargeId, { authorization: auth.id });
 *   return { authorizationId: auth.id };
 * });
 * return this.phases.finish(async (manager) => { ...; return { id: chargeId } });
 */
@Injectable()
export class PhaseRunner {
  constructor(private readonly database: IdempotencyDatabase) {}

  /**
   * A phase around one external call (a PSP, a bank): `call` runs first, with no transaction
   * open and no connection held, carrying the phase's derived key; then `record` writes what
   * it returned in a short transaction that commits with the recovery point, fenced like
   * every phase. Its return value (or, without `record`, the call's result) is the phase's
   * stored result. A worker that crashed between the call and its record is taken over: the
   * call runs again with the same derived key, so the external system answers it once.
   *
   * This is the form to use for external calls: a pool of 10 connections then serves any
   * number of requests waiting on a slow system, where a transaction held open across the
   * call would cap them at 10 per call latency.
   *
   * @example
   * const auth = await this.phases.call(
   *   'psp_authorized',
   *   ({ idempotencyKey }) => this.psp.authorize(charge, idempotencyKey),
   *   async (manager, result) => {
   *     await manager.update(Charge, chargeId, { authorization: result.id });
   *     return { authorizationId: result.id };
   *   },
   * );
   */
  async call<R, T = R>(
    phase: string,
    call: ExternalCall<R>,
    record?: CallRecord<R, T>,
  ): Promise<T> {
    refuseUnrecordable(phase);
    const context = currentIdempotencyContext();
    const claim = context?.claim;
    const recorded = (manager: EntityManager, result: R) =>
      record ? record(manager, result) : Promise.resolve(result as unknown as T);
    if (!claim) {
      const idempotencyKey = `${context?.keylessId ?? randomUUID()}:${phase}`;
      const result = await outsideTransactions(() => call({ phase, idempotencyKey }));
      const value = record
        ? await this.database.runInTransaction((manager) => record(manager, result))
        : (result as unknown as T);
      // As a keyed request's phase sees it: what JSON keeps of it.
      return asStored(value);
    }
    refuseAfterRefusal(context);
    const done = completedPhase(claim.phaseResults, phase);
    if (done.completed) return done.result as T;
    if (context.transaction?.begun) throw new PhaseOrderError(phase);
    // Refused before the call: a phase's record could not commit with its recovery point.
    const store = storeOf(context, phase);
    const transaction = context.transaction!;
    // From here to its record, a statement of the request's own beside it is refused: it
    // would hold locks to the request's answer that the phase may wait on (`duringPhase`).
    return transaction.duringPhase(async () => {
      // The call carries a key derived from the claim: committed first, so that a retry
      // after a crash derives the same one (see `commitClaimAlone`).
      await this.guard(() => transaction.commitClaimAlone());
      const result = await outsideTransactions(() =>
        call({ phase, idempotencyKey: derivedKey(claim, phase) }),
      );
      return this.commit(transaction, store, claim, phase, (manager) => recorded(manager, result));
    });
  }

  /**
   * Runs one atomic phase of local effects, or returns its stored result if a previous worker
   * completed it. The result must be JSON-serializable (it is stored with the recovery point);
   * keep it small: ids, not rows. Its transaction opens at its first statement; for a phase
   * that calls another system, use `call()`, which never holds the transaction across it.
   */
  async run<T>(phase: string, work: PhaseWork<T>): Promise<T> {
    refuseUnrecordable(phase);
    const context = currentIdempotencyContext();
    const claim = context?.claim;
    if (!claim) {
      // No key (an optional one, not sent): nothing to resume, so a plain transaction. The
      // external call still gets a key of its own, unique to this request.
      const idempotencyKey = `${context?.keylessId ?? randomUUID()}:${phase}`;
      return this.database.runInTransaction((manager) => work(manager, { phase, idempotencyKey }));
    }
    refuseAfterRefusal(context);
    const done = completedPhase(claim.phaseResults, phase);
    if (done.completed) return done.result as T;
    if (context.transaction?.begun) throw new PhaseOrderError(phase);
    const store = storeOf(context, phase);
    const transaction = context.transaction!;
    // From here to its commit, a statement of the request's own beside it is refused: it
    // would hold locks to the request's answer that the phase may wait on (`duringPhase`).
    return transaction.duringPhase(async () => {
      // A phase commits its recovery point on the claim's row. A claim not committed yet
      // (`oneCommit`) commits with the phase's work, in one transaction; unless the work takes
      // the phase's context, whose derived key must outlast a crash before that commit (a
      // call out with it): the claim then commits alone first, as on any route.
      const withClaim = transaction.holdsClaim && work.length < 2;
      if (!withClaim) await this.guard(() => transaction.commitClaimAlone());
      const phaseWith = phaseContext(claim, phase, transaction);
      return this.commit(
        transaction,
        store,
        claim,
        phase,
        (manager) => work(manager, phaseWith),
        withClaim ? transaction : undefined,
      );
    });
  }

  /** Commits a phase's work with its recovery point; returns its result as stored. */
  private async commit<T>(
    request: RequestTransaction,
    store: TransactionalClaimStore,
    claim: ActiveClaim,
    phase: string,
    work: (manager: EntityManager) => Promise<T>,
    holder?: StoreTransaction,
  ): Promise<T> {
    const value = await this.guard(
      () =>
        store.commitPhase(claim, phase, byWork(refusedTo(request, work), this.workThrew), holder),
      request,
    );
    // What was stored, as JSON: this worker sees exactly what a takeover would see (a Date
    // becomes a string here too), so resumed code takes the same branches.
    const stored = asStored(value);
    recordPhaseResult(claim.phaseResults, phase, stored);
    return stored;
  }

  /**
   * The last phase: its effects join the request's transaction, which commits them together
   * with the response before a byte goes out, so the key is never done without its effects,
   * nor the effects without the stored response. Return the body (sent with the route's
   * status) or `respond(status, body)`.
   */
  async finish<R>(work: (manager: EntityManager) => Promise<R>): Promise<ResponseBody<R>> {
    const context = currentIdempotencyContext();
    const transaction = context?.transaction;
    if (!context?.claim || !transaction) {
      const value = await this.database.runInTransaction(work);
      // Sent in place of the adapter's answer, so `respond()` keeps its status without a key.
      if (context && value instanceof PhaseResponse)
        context.finished = toStoredResponse(value, context);
      return bodyOf(value);
    }
    refuseAfterRefusal(context);
    storeOf(context, 'finish');
    // The last phase's work is the request's, even on a route that is not atomic.
    transaction.joinable = true;
    const value = await this.guard(() =>
      transactionScope.run(transaction, () => byWork(work, this.workThrew)(transaction.manager)),
    );
    // Stored, when the request's transaction commits, in place of what the adapter writes.
    context.finished = toStoredResponse(value, context);
    return bodyOf(value);
  }

  /** The derived key of a phase, for an external call made outside `run()`. */
  idempotencyKey(phase: string): string | undefined {
    refuseUnrecordable(phase);
    const context = currentIdempotencyContext();
    if (!context) return undefined;
    if (context.transaction?.claimUncommitted) throw new DerivedKeyBeforeClaimCommittedError(phase);
    return context.claim ? derivedKey(context.claim, phase) : `${context.keylessId}:${phase}`;
  }

  /**
   * A database that cannot be reached, or that rolled the phase back for a passing reason, is
   * a 503 with nothing stored, never a stored 500.
   */
  private async guard<T>(commit: () => Promise<T>, request?: RequestTransaction): Promise<T> {
    try {
      return await commit();
    } catch (error) {
      // The phase's commit refused (its work caught a refusal and went on): the request's too.
      if (
        error instanceof TransactionAbortedError &&
        error.cause instanceof TransactionControlRefusedError
      )
        request?.refusedInPhase(error.cause);
      const failure = classifyHandlerError(error);
      if (failure.kind !== 'retry') throw error;
      // The work's own failure, handed on in the library's words: said so (see
      // phase-work-failure.ts), for a job to count it as its own. So is a commit that met a
      // transaction its work's own failed statement aborted, the work having caught it and
      // gone on (adversary 70: a caught statement_timeout).
      if (
        (typeof error === 'object' && error !== null && this.workThrew.has(error)) ||
        error instanceof TransactionAbortedError
      ) {
        notePhaseWorkFailure(failure.error, error);
      }
      throw failure.error;
    }
  }

  /** What phases' work threw (see `byWork`), as `guard` tells it from their commits'. */
  private readonly workThrew = new WeakSet<object>();
}

/**
 * What a phase's work gets besides its manager. Its derived key is refused while the claim is
 * not committed (work that reads it through a rest parameter, on a `oneCommit` route): a crash
 * before that commit would leave a retry deriving another key for the same call.
 */
function phaseContext(
  claim: ActiveClaim,
  phase: string,
  transaction: { readonly claimUncommitted: boolean },
): PhaseContext {
  return {
    phase,
    get idempotencyKey() {
      if (transaction.claimUncommitted) throw new DerivedKeyBeforeClaimCommittedError(phase);
      return derivedKey(claim, phase);
    },
  };
}

/**
 * Refuses a phase, a `call()` or `finish()` of a request that carries a refusal, before
 * anything of it runs: it throws what `refusedAfter` says (the refusal again, or the refused
 * commit a caught best-effort refusal leads to). A phase committed past it would stay while the
 * client is told nothing was committed or stored, and the retry after the fix would skip it
 * (adversaries 102, 103). The request carries a refusal from the moment it is met, in its own
 * transaction or in a phase's still running (`refusalsTo`), so a phase started beside that one
 * (`Promise.all`) is refused too. A phase already started when the refusal is met (a write
 * beside it, refused, while it commits the claim alone or runs its work) is not stopped: its
 * work, record included, commits, and the retry resumes after it (adversary 51b).
 */
function refuseAfterRefusal(context: {
  readonly claim?: ActiveClaim;
  readonly transaction?: { readonly refusal: TransactionControlRefusedError | undefined };
}): void {
  const refused = context.claim ? refusedAfter(context.transaction?.refusal) : undefined;
  if (refused) throw refused;
}

/** Refuses a phase name PostgreSQL cannot record as it is, before anything of it runs. */
function refuseUnrecordable(phase: string): void {
  if (!recordablePhaseName(phase)) throw new IdempotencyPhaseNameInvalidError(phase);
}

/** The request's claim store, if its phases can commit with their recovery points there. */
function storeOf(context: IdempotencyContext, phase: string): TransactionalClaimStore {
  const store = context.claimStore;
  if (!store || !isTransactional(store)) {
    throw new PhasesNeedTransactionalStoreError(phase, context.route);
  }
  return store;
}

/**
 * A phase on a route whose claim store is not in the app's database (Redis): its effects
 * cannot commit together with its recovery point there, so a crash between the two would run
 * it again. Refused before anything of it runs.
 */
export class PhasesNeedTransactionalStoreError extends Error {
  constructor(phase: string, route: string) {
    super(
      `phase "${phase}" of ${route || 'this route'}: phases commit their effects with their ` +
        "recovery point, which needs the claim store in the app's PostgreSQL; this route's " +
        'claim store is not (set claimStore: "postgres" on it)',
    );
    this.name = 'PhasesNeedTransactionalStoreError';
  }
}

/**
 * A phase run after the handler's own database work had opened the request's transaction.
 * Refused, because that transaction would stay open (holding its connection and its locks)
 * across the phase, external call included, and a phase that touches the same rows would
 * wait on it forever. Run the phases first and write the rest after them, or in `finish()`.
 */
export class PhaseOrderError extends Error {
  constructor(phase: string) {
    super(
      `phase "${phase}" started after the request's transaction began (a write outside a ` +
        'phase begins it, and so does a read on a route above READ COMMITTED, whose reads ' +
        'count): run atomic phases first, read what they need inside them, and write outside ' +
        'them only after the last one (or in finish())',
    );
    this.name = 'PhaseOrderError';
  }
}

/**
 * A derived key asked for while the claim is not committed (`oneCommit`): a crash before the
 * commit leaves no trace of the claim, and its retry would derive another key, so the system
 * called with this one would run the call twice.
 */
export class DerivedKeyBeforeClaimCommittedError extends Error {
  constructor(phase: string) {
    super(
      `idempotencyKey("${phase}") on a oneCommit route, whose claim commits only with the ` +
        "handler's work: the key would not survive a crash before that commit. Make the call " +
        'in phases.call(), which commits the claim first, or set oneCommit: false on the route',
    );
    this.name = 'DerivedKeyBeforeClaimCommittedError';
  }
}

/** The body a finish sends: a `PhaseResponse`'s, or the returned value itself. */
export type ResponseBody<R> = R extends PhaseResponse<infer B> ? B : R;

function bodyOf<R>(value: R): ResponseBody<R> {
  return (value instanceof PhaseResponse ? value.body : value) as ResponseBody<R>;
}

function toStoredResponse(value: unknown, context: IdempotencyContext): StoredResponse {
  const response = value instanceof PhaseResponse ? value : undefined;
  const body = response ? response.body : value;
  return {
    status: response?.status ?? context.defaultStatus,
    headers: { 'content-type': JSON_CONTENT_TYPE, ...lowerCased(response?.headers ?? {}) },
    body: Buffer.from(body === undefined ? '' : JSON.stringify(body)),
  };
}

function lowerCased(headers: Readonly<Record<string, string>>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const [name, value] of Object.entries(headers)) {
    // Reserved for sealed rows: a handler's header of that name would read as one.
    if (name !== SEALED_MARKER) out[name.toLowerCase()] = value;
  }
  return out;
}

/**
 * `work`, handing what the seam refuses in the phase's transaction (the scope it runs in) on
 * to the request's as it is met (`refusalsTo`), whether the work then lets the refusal out,
 * catches it and throws its own error, or goes on: a phase's refusal is the request's, answered
 * by the same rule (`refusalAnswer`) as one met in the handler (adversary 100), and known to
 * the request at once, not when the work ends: a phase or `call()` started beside it meanwhile
 * is refused, and a sibling's error is not stored in its place (adversary 103).
 */
function refusedTo<T>(
  request: RequestTransaction,
  work: (manager: EntityManager) => Promise<T>,
): (manager: EntityManager) => Promise<T> {
  return async (manager) => {
    const phase: unknown = transactionScope.getStore();
    if (phase instanceof RequestTransaction) phase.refusalsTo(request);
    return work(manager);
  };
}

/** `work`, noting in `threw` what it throws (see `guard`). */
function byWork<A, T>(work: (arg: A) => Promise<T>, threw: WeakSet<object>) {
  return async (arg: A): Promise<T> => {
    try {
      return await work(arg);
    } catch (error) {
      if (typeof error === 'object' && error !== null) threw.add(error);
      throw error;
    }
  };
}
