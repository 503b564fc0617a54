import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { lastValueFrom } from 'rxjs';
import { publish } from '../events/idempotency-events.js';
import { computeFingerprint } from '../fingerprint/fingerprint.js';
import { canonicalizeValue } from '../fingerprint/canonical-json.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from '../idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from '../shapes/idempotency-options.interface.js';
import { ClaimStores } from '../claim-stores.js';
import { IdempotencyDatabase } from '../data-layers/idempotency-database.js';
import { LeaseRenewals } from '../claim/lease-renewals.js';
import { POSTGRES_CLAIM_STORE } from '../idempotency-options.js';
import {
  isTransactional,
  type KeyScope,
  type TransactionalClaimStore,
} from '../shapes/claim-store.interface.js';
import { claimOrDecide, type ClaimResult } from '../http/claim-or-decide.js';
import { claimWithWork } from '../http/claim-with-work.js';
import {
  FORGET_JOB_STEP_DATA,
  MARK_JOB_STEP_DATA_WRITTEN,
  MARK_JOB_STEP_LOST,
  RELEASE_JOB_STEP,
} from '../claim/postgres-statements.js';
import { problemResponse } from '../http/problem.js';
import { IdempotencyContext } from '../transaction/idempotency-context.js';
import { idempotencyStorage } from '../transaction/idempotency-context.js';
import { transactionScope } from '../transaction/transaction-scope.js';
import { commitAnswer } from '../transaction/commit-answer.js';
import {
  headlessOwnerTools,
  type OwnerTools,
  eventOf,
  rollBackAndRelease,
} from '../transaction/owner-tools.js';
import { type RequestTransaction } from '../transaction/request-transaction.js';
import { TransactionAbortedError } from '../transaction/seam-errors.js';
import {
  IdempotencyKeyInProgressError,
  IdempotencyKeyMismatchError,
  IdempotencyLeaseLostError,
  IdempotencyResponseTooLargeError,
  IdempotencyStoredResponseUnreadableError,
  RetryLaterError,
} from '../shapes/idempotency.errors.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import {
  JobAnswerRefusedError,
  JobKeyMismatchError,
  JobKeyUnusableError,
  JobMoveInPhaseError,
  JobQueueTenantTooLongError,
  JobQueueTenantUnstorableError,
  JobQueueStoreUnreadableError,
  JobResultTooLargeError,
  JobResultUnstorableError,
  JobStepLostError,
  JobStepOwnerGoneError,
} from './job-errors.js';
import { IDEMPOTENT_JOB_OPTIONS } from '../shapes/idempotency.constants.js';
import { classMethods } from '../routes/class-methods.js';
import { decodeJobResult, encodeJobResult, isJobResult } from './job-answer.js';
import { ANSWER_HELD, answerHeldHeader, answerHeldToWrite } from './answer-held.js';
import { afterJobError, isJobStep, stepMoveOf } from './job-failure.js';
import { phaseWorkFailure } from '../phases/phase-work-failure.js';
import { moveInPhaseRefusal } from './move-in-phase.js';
import { jobKeyOf, jobTenant, stepOwnerOf, tenantFits, tenantProblem } from './job-key.js';
import { jobStore } from './job-store.js';
import {
  dataToRestore,
  type HeldData,
  jsonOf,
  keptStepData,
  mayBeStale,
  readdedWithoutStepData,
  STEP_DATA,
  STEP_LOST,
  STEP_OWNER,
  stepDataKept,
  stepHold,
  stepJob,
  type SteppedJob,
} from './job-steps.js';
import { freshDataOf, stepOwnerSeen, waitSecondsFor } from './fresh-job-data.js';
import { type JobLike } from './job-like.js';
import { bindJobClass, bindJobs } from './job-registry.js';
import {
  type IdempotentJobOptions,
  type ResolvedJobOptions,
  resolveJobOptions,
} from './idempotent-job.options.js';
import { bullmqErrors } from './bullmq-errors.js';
import { tooLargeResult } from './too-large-result.js';

/**
 * Runs `@IdempotentJob()` processors' jobs once per key: the job's record (its key, then its
 * result) commits in one transaction with its database work, as a route's answer does, so a
 * job that comes back (stalled, retried after a crash, added twice with one key) whose work
 * committed is completed with its kept result and not run again; one whose work did not
 * commit runs again. `PhaseRunner` works inside a job as inside a route: a call out commits
 * the record first, and a job taken over after a crash resumes after its last phase.
 */
@Injectable()
export class IdempotentJobs implements OnModuleInit {
  private readonly logger = new Logger('Idempotency');
  private readonly tools: OwnerTools;
  private readonly settings = new WeakMap<IdempotentJobOptions, ResolvedJobOptions>();

  constructor(
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
    private readonly stores: ClaimStores,
    private readonly database: IdempotencyDatabase,
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
  ) {
    // A job's record is read from the database each time: BullMQ's own state says most
    // duplicates apart, and the replay cache is the HTTP retries'.
    this.tools = headlessOwnerTools(
      options,
      this.logger,
      new LeaseRenewals(this.logger),
      (error) => problemResponse(error),
      'bullmq',
    );
  }

  /**
   * Binds every provider with an `@IdempotentJob()` method to this module's runner: its one
   * instance, or its class where `@nestjs/bullmq` makes one per job (request-scoped).
   */
  onModuleInit(): void {
    for (const wrapper of this.discovery.getProviders()) {
      const type = providerClassOf(wrapper);
      if (typeof type !== 'function' || !this.hasJobs(type)) continue;
      const instance: unknown = wrapper.instance;
      if (wrapper.isDependencyTreeStatic() && instance && typeof instance === 'object') {
        bindJobs(instance, this);
      } else {
        bindJobClass(type, this);
      }
    }
  }

  private hasJobs(type: object): boolean {
    const methods = classMethods([type], (prototype) => this.scanner.getAllMethodNames(prototype));
    for (const { handler } of methods) {
      if (Reflect.getMetadata(IDEMPOTENT_JOB_OPTIONS, handler) !== undefined) return true;
    }
    return false;
  }

  /**
   * Runs `work` (the processor's method on `job`) once per the job's key; what it returns is
   * the job's result. `token`: the job's lock, for moving it to the delayed set.
   */
  async run(
    where: string,
    options: IdempotentJobOptions,
    job: JobLike,
    token: string | undefined,
    work: (job: JobLike) => Promise<unknown>,
  ): Promise<unknown> {
    const errors = await bullmqErrors();
    try {
      return await this.runOnce(where, options, job, work);
    } catch (caught) {
      const fromWork = typeof caught === 'object' && caught !== null && THROWN_BY_WORK.has(caught);
      // A phase's own work's failure, handed on by `PhaseRunner` in the library's words: the
      // job's own error, as the same statement outside a phase (adversary 69).
      const inPhase = fromWork ? phaseWorkFailure(caught) : undefined;
      const error = inPhase ? inPhase.thrown : caught;
      const step = afterJobError(error, fromWork);
      if (step.kind === 'throw') throw error;
      if (step.kind === 'fail') {
        const reading = jobKeyOf(job, this.settingsOf(where, options).key);
        const said =
          error instanceof IdempotencyKeyMismatchError && reading.kind === 'key'
            ? new JobKeyMismatchError(where, reading.key)
            : error;
        throw new errors.UnrecoverableError(`@IdempotentJob() on ${where}: ${messageOf(said)}`);
      }
      // Back to the delayed set, no attempt counted (BullMQ's way for a processor): without
      // the job's lock token it cannot move, and its error counts as an attempt instead.
      if (token === undefined) throw error;
      this.logger.debug?.(`job ${job.id} of ${where} waits ${step.ms} ms: ${messageOf(error)}`);
      await job.moveToDelayed(Date.now() + step.ms, token);
      throw new errors.DelayedError();
    }
  }

  /**
   * Commits the job's step as it moves itself on: its work with its key unfinished, its lease
   * ended and the job named its owner, fenced. Throws where it could not (the move is then
   * refused, and the job never goes on without its step).
   */
  private async commitStep(
    context: IdempotencyContext,
    transaction: RequestTransaction,
    job: JobLike,
    owner: string,
    held: HeldData,
  ): Promise<void> {
    let kept: boolean;
    try {
      kept = await transaction.commitWith(stepStatement(context, job, owner, held));
    } catch (error) {
      // The library's commit, failing in the job's move: not the job's own error; unless it
      // met a transaction the job's own failed statement aborted, the job having caught it and
      // gone on (adversary 70: a caught statement_timeout, then a step).
      const own = error instanceof TransactionAbortedError || transaction.lastError !== undefined;
      if (!own && typeof error === 'object' && error !== null) THROWN_BY_LIBRARY.add(error);
      throw error;
    }
    if (!kept) throw new IdempotencyLeaseLostError();
  }

  private async keepStep(
    context: IdempotencyContext,
    where: string,
    transaction: RequestTransaction,
    job: JobLike,
    fingerprint: Buffer,
    owner: string,
    held: HeldData,
  ): Promise<boolean> {
    const claim = context.claim!;
    let why: string;
    try {
      const kept = await transaction.commitWith(stepStatement(context, job, owner, held));
      if (kept) return true;
      why = 'its key is another worker’s now';
    } catch (error) {
      await transaction.rollback();
      why = messageOf(error);
    }
    // Rolled back while the job moved on (its data says the step was done): noted on its key,
    // so that its next run fails for good, saying so, rather than go on without it.
    this.logger.error(`a step of job ${claim.key} (${where}) did not commit: ${why}`);
    await this.database
      .query(MARK_JOB_STEP_LOST, [claim.tenantId, claim.key, STEP_LOST, why, fingerprint])
      .catch((error: unknown) =>
        this.logger.error(
          `the lost step of job ${claim.key} (${where}) could not be noted: ${messageOf(error)}`,
        ),
      );
    return false;
  }

  /**
   * Notes on the job's key that BullMQ has its step's data (see `dataToRestore`), fenced by
   * that data: a later step's is never touched. A note that fails leaves it to compare data.
   */
  private async noteStepWritten(
    context: IdempotencyContext,
    job: JobLike,
    held: NonNullable<HeldData>,
  ): Promise<void> {
    const claim = context.claim!;
    const kept = keptStepData(held, job.timestamp);
    await this.database
      .query(MARK_JOB_STEP_DATA_WRITTEN, [claim.tenantId, claim.key, STEP_DATA, kept.data])
      .catch((error: unknown) =>
        this.logger.warn(
          `that job ${claim.key} has its step's data could not be noted: ${messageOf(error)}`,
        ),
      );
  }

  /**
   * Tells the job's key that the job wrote its data after its step committed and it moved
   * (BullMQ's docs' order): the data the key keeps is the step before's, not the next one's, so
   * no job that takes the key over goes on from it (see `FORGET_JOB_STEP_DATA`). Fenced by the
   * step this run committed (the claim's version it committed at, kept on the key with it),
   * never by the key's version now: another job that looked at the key in between (claimed it,
   * found it held, gave it back) moved that on (adversary 75). A note that fails, or that finds
   * its step no longer the key's last (another step, the job's result, a takeover came first),
   * is logged: the write to BullMQ goes on, as without the library.
   */
  private async forgetStepData(context: IdempotencyContext, job: JobLike): Promise<void> {
    const claim = context.claim!;
    const why = await this.database
      .query(FORGET_JOB_STEP_DATA, [
        claim.tenantId,
        claim.key,
        STEP_DATA,
        claim.lockVersion,
        claim.claimId,
        job.timestamp,
      ])
      .then(
        ({ rowCount }) => (rowCount ? undefined : 'its step is no longer the key’s last'),
        (error: unknown) => messageOf(error),
      );
    if (why === undefined) return;
    this.logger.error(
      `that job ${claim.key} wrote its data after its step moved it could not be noted: ` +
        `a job that takes its key over may go on from the step before: ${why}`,
    );
  }

  /**
   * Writes to BullMQ, on the replay of a job, the data and progress its run held and kept with
   * its result (see `answerHeldToWrite`), where its worker died after that commit before BullMQ
   * had them, or the write failed (adversary 76). A write that fails: delayed, no attempt
   * counted, and the next replay writes them.
   */
  private async writeAnswerHeld(
    where: string,
    job: JobLike,
    stored: StoredResponse,
  ): Promise<void> {
    const write = answerHeldToWrite(
      stored,
      { id: job.id, added: job.timestamp },
      jsonOf(job.data),
      jsonOf(job.progress),
    );
    if (!write) return;
    try {
      if (write.data) await job.updateData?.(write.data.data);
      if (write.progress) await job.updateProgress?.(write.progress.value);
    } catch (error) {
      throw heldNotWritten(where, error);
    }
  }

  /**
   * A method's options, resolved once: by the decorator's own options object, never by the
   * method's name (two processor classes of one name, made by a factory per queue, are two
   * methods with their own keys: adversary 55).
   */
  private settingsOf(where: string, options: IdempotentJobOptions): ResolvedJobOptions {
    let resolved = this.settings.get(options);
    if (!resolved) {
      resolved = resolveJobOptions(options, where, this.options.route);
      this.settings.set(options, resolved);
    }
    return resolved;
  }

  private async runOnce(
    where: string,
    options: IdempotentJobOptions,
    job: JobLike,
    work: (job: JobLike) => Promise<unknown>,
  ): Promise<unknown> {
    const { key: keyOf, fingerprint: intentOf, namespace, route } = this.settingsOf(where, options);
    const reading = jobKeyOf(job, keyOf);
    if (reading.kind === 'unusable') {
      throw new JobKeyUnusableError(where, reading.reason);
    }
    // What the library reads tells the service's queues apart; the namespace names the service
    // around it, and stands alone only where it reads nothing (adversary 94).
    const place = await jobStore(job);
    if (place.kind === 'unreadable' && namespace === undefined) {
      throw new JobQueueStoreUnreadableError(where, place.what);
    }
    const scope: KeyScope = {
      tenantId: jobTenant(job.queueName, job.prefix, place, namespace),
      key: reading.key,
    };
    // Checked before the claim, whose CHECK violation (or a NUL's 22021) would be taken for a
    // passing failure: delayed for ever, no attempt counted (adversaries 78, 99).
    const problem = tenantProblem(scope.tenantId);
    if (problem) throw new JobQueueTenantUnstorableError(where, scope.tenantId, problem);
    if (!tenantFits(scope.tenantId)) {
      throw new JobQueueTenantTooLongError(where, scope.tenantId, job.queueName);
    }
    const fingerprint = computeFingerprint({
      method: 'JOB',
      path: `${job.queueName}/${job.name}`,
      headers: [],
      // A key of the app's own names an intent: another job's data under it is a mistake. A
      // job's own id names the job, whose data it may update as it goes (`job.updateData`).
      body: reading.derived ? canonicalizeValue((intentOf ? intentOf(job) : job.data) ?? null) : '',
    });
    const store = this.stores.get(POSTGRES_CLAIM_STORE) as TransactionalClaimStore;
    const began = performance.now();
    const event = () => ({
      route: where,
      tenant: scope.tenantId,
      key: scope.key,
      durationMs: performance.now() - began,
    });
    await this.database.ready();
    /** The library's refusal of this run's answer, with its cause (see below). */
    let refusal: Error | undefined;
    const tools: OwnerTools = {
      ...this.tools,
      problem: (error) => {
        refusal = error;
        return this.tools.problem(error);
      },
    };
    const claimed: ClaimResult<RequestTransaction> = await lastValueFrom(
      route.oneCommit && isTransactional(store) && store.claimIn
        ? claimWithWork(
            store,
            this.database.transaction(false),
            scope,
            fingerprint,
            route,
            event,
            this.logger,
          )
        : claimOrDecide(
            store,
            scope,
            fingerprint,
            route.leaseMs,
            event,
            this.logger,
            route.conflictRetryAfterSeconds,
          ),
    );
    if (claimed.kind === 'replay') {
      publish('replayed', () => ({
        ...event(),
        status: claimed.response.status,
        fromMemory: false,
      }));
      const result = resultOf(claimed.response);
      await this.writeAnswerHeld(where, job, claimed.response);
      return result;
    }
    const transaction = claimed.transaction ?? this.database.transaction(false);
    transaction.isolationLevel = route.isolationLevel;
    const context = new IdempotencyContext(claimed.claim, 200, transaction, true, store);
    context.route = where;
    // A key between another job's steps (its owner), or one whose step was lost.
    const owner = stepOwnerOf(job, reading.derived);
    let held = stepHold(claimed.claim.phaseResults, owner);
    /** Whose last step's data this run goes on from (see `dataToRestore`). */
    let restoreAs = owner;
    // Held by a job BullMQ no longer has (removed, or replaced by its deduplication, between
    // its steps): no run of it will end them. This job takes them over and goes on from the
    // step the key reached, its data given back from there (adversary 72), its own steps then
    // naming it (another job waiting on the key waits for it: adversary 73); or, where the key
    // forgot the data of that step (the job saved its next step after it moved), it fails,
    // saying so, rather than do the steps again from its own first. A key whose steps were
    // polls forgot nothing: it goes on from its own data (adversary 75).
    const ownerNow = claimed.claim.phaseResults[STEP_OWNER];
    const seen = held?.kind === 'held' ? await stepOwnerSeen(job, ownerNow) : undefined;
    // The same for a job of the app's own id added again under it, whose key forgot the data
    // of its last step: it is the owner by name, another job by the time it was added.
    const readded = readdedWithoutStepData(claimed.claim.phaseResults, owner, job.timestamp);
    if ((seen?.kind === 'gone' && stepDataKept(claimed.claim.phaseResults) === 'none') || readded) {
      await rollBackAndRelease(tools, context, 'job_step_lost');
      throw new JobStepOwnerGoneError(where, String(ownerNow));
    }
    if (seen?.kind === 'gone') {
      restoreAs = ownerNow as string;
      held = undefined;
    }
    if (held) {
      await rollBackAndRelease(
        tools,
        context,
        held.kind === 'lost' ? 'job_step_lost' : 'job_step_held',
      );
      // Each return is a start BullMQ counts (`maxStartedAttempts`): see `waitSecondsFor`.
      const starts = Number((job as { attemptsStarted?: unknown }).attemptsStarted) || 0;
      throw held.kind === 'lost'
        ? new JobStepLostError(where, held.why)
        : new IdempotencyKeyInProgressError(waitSecondsFor(seen, starts));
    }
    // Given the data of before its last step, which BullMQ has since: BullMQ's, read afresh.
    if (mayBeStale(claimed.claim.phaseResults, owner, job.timestamp, jsonOf(job.data))) {
      const fresh = await freshDataOf(job).catch(() => undefined);
      if (fresh) Reflect.set(job, 'data', fresh.data);
    }
    // Its data as its last step committed it, where its worker died before BullMQ had it.
    const restore = dataToRestore(
      claimed.claim.phaseResults,
      restoreAs,
      job.timestamp,
      jsonOf(job.data),
    );
    if (restore) {
      try {
        await job.updateData?.(restore.data);
      } catch (error) {
        await rollBackAndRelease(tools, context, 'job_failed');
        throw error;
      }
    }
    const stopHeartbeat = route.heartbeat
      ? this.tools.renewals.heartbeat(store, claimed.claim, transaction)
      : undefined;
    /** Its step, committed as the job moves itself on (see `stepJob`), once. */
    let step: Promise<void> | undefined;
    const commitStep = (data: HeldData) => {
      stopHeartbeat?.();
      step ??= this.commitStep(context, transaction, job, owner, data);
      return step;
    };
    // Its data written once its work committed, its moves committing its steps: in place, so
    // that the job a request-scoped consumer gets (`JOB_REF`) is stepped too (see `stepJob`).
    const stepped = stepJob(
      job,
      commitStep,
      // Held from the run's start (its first statement may come after it: adversary 64).
      () => !transaction.ended,
      (moved) =>
        void moved.catch((error: unknown) =>
          this.logger.error(
            `a step of job ${job.id} (${where}) did not commit after the job moved to wait ` +
              `for its children: its work was rolled back, and its next run does it again ` +
              `(BullMQ keeps its data of the step before): ${messageOf(error)}`,
          ),
        ),
      (held) => this.noteStepWritten(context, job, held),
      () => this.forgetStepData(context, job),
      (move) => {
        const refusal = moveInPhaseRefusal(move, transaction.phasesRunningNow);
        if (refusal) throw new JobMoveInPhaseError(where, refusal);
      },
    );
    try {
      return await this.runStepped(where, job, work, {
        context,
        owner,
        transaction,
        tools,
        stepped,
        fingerprint,
        stopHeartbeat,
        step: () => step,
        refusal: () => refusal,
        route,
      });
    } finally {
      stepped.release();
    }
  }

  /** The rest of `runOnce`, once the job is stepped (see `stepJob`). */
  private async runStepped(
    where: string,
    job: JobLike,
    work: (job: JobLike) => Promise<unknown>,
    run: SteppedRun,
  ): Promise<unknown> {
    const { context, transaction, tools, stepped, fingerprint, stopHeartbeat, route } = run;
    let result: unknown;
    try {
      result = await idempotencyStorage.run(context, () =>
        transactionScope.run(transaction, () => {
          // From here its database work joins the job's transaction (`atomic`).
          context.startHandler();
          return work(job);
        }),
      );
    } catch (error) {
      // As below: renewed until the statements its work left running are done.
      stopHeartbeat?.();
      if (isJobStep(error)) {
        // The job moved itself (BullMQ's steps: `moveToDelayed` then `DelayedError`, and the
        // like): not done, but what it did stands, as without the library. Its work commits
        // with its key unfinished (as it moved, where it moved through the job), and its
        // next run takes the key over. Moved another way (`worker.rateLimit()`), it commits
        // now, and a step that cannot is noted on its key (see `keepStep`).
        const step = run.step();
        let kept = false;
        if (step) {
          kept = await step.then(
            () => true,
            () => false,
          );
          // A step that did not commit after the job moved (`moveToWaitingChildren`): its
          // work rolled back, the key given back at once for the job's next run.
          if (!kept) await rollBackAndRelease(tools, context, 'job_step_failed');
        } else if (
          await this.keepStep(
            context,
            where,
            transaction,
            job,
            fingerprint,
            run.owner,
            stepped.held(),
          )
        ) {
          kept = true;
          await stepped.flushStep();
        }
        if (kept) publish('jobStep', () => ({ ...eventOf(context), move: stepMoveOf(error) }));
        throw error;
      }
      // Nothing of a failed job is kept: its work rolled back, its key given back (its
      // completed phases stay, and the next attempt resumes after them).
      const cause = transaction.failureOf(error);
      await rollBackAndRelease(tools, context, 'job_failed');
      if (typeof cause === 'object' && cause !== null && !THROWN_BY_LIBRARY.has(cause)) {
        THROWN_BY_WORK.add(cause);
      }
      throw cause;
    }
    // Renewed until the statements its work left running are done: its commit waits for them,
    // and a lease run out meanwhile would let a stalled job's next worker run it again before
    // that commit (see `heartbeatStop`).
    stopHeartbeat?.();
    let answer;
    try {
      answer = encodeJobResult(result);
    } catch (error) {
      await rollBackAndRelease(tools, context, 'job_result_unstorable');
      throw new JobResultUnstorableError(where, error);
    }
    // What it holds, written to BullMQ after the commit: kept with its result, for its replay.
    const held = answerHeldHeader(stepped.held(), stepped.heldProgress(), {
      id: job.id,
      added: job.timestamp,
    });
    if (held !== undefined) answer.headers[ANSWER_HELD] = held;
    const over = answer.body.length > route.maxResponseBytes;
    // Too large, where a step or a phase of the job committed before: not its final answer
    // (that would strand them, every retry replaying it), but its failure, its key given back
    // unfinished with them, as for an error of its own (adversary 88).
    if (over && tooLargeResult(context.claim!.phaseResults) === 'give-back') {
      await rollBackAndRelease(tools, context, 'response_too_large');
      throw new JobResultTooLargeError(where, answer.body.length, route.maxResponseBytes);
    }
    const tooLarge = over
      ? tools.problem(new IdempotencyResponseTooLargeError(route.maxResponseBytes))
      : undefined;
    const stored = tooLarge
      ? await commitAnswer(tools, context, fingerprint, tooLarge, true)
      : await commitAnswer(tools, context, fingerprint, answer, false);
    // Kept: the result as BullMQ keeps it (its JSON), the same on every replay; or the
    // library's refusal kept in its place (a result too large).
    if (stored === answer || stored === tooLarge) {
      // Its data as the job left it, now that its work committed; none where the refusal was
      // kept in place of its result: its work rolled back (adversary 75), and `release` gives
      // the job object back BullMQ's data.
      if (stored === answer) {
        try {
          await stepped.flush();
        } catch (error) {
          throw heldNotWritten(where, error);
        }
      }
      return resultOf(stored);
    }
    // Not kept, nothing committed: the library's answer says why.
    // The database's words where it gave them (a statement that failed, a constraint checked
    // at COMMIT), else the library's.
    const cause = (run.refusal() as { cause?: unknown } | undefined)?.cause;
    const detail = cause instanceof Error ? cause.message : problemDetail(stored);
    const why = `the job's result was not kept, nothing of it committed: ${detail}`;
    // The database failed, or another worker owns the key: the job comes back later, and
    // runs again or completes with that worker's result. Not where a statement of its own
    // failed and it went on (caught it): PostgreSQL aborted its transaction for that, and it
    // is the job's fault however passing the statement's failure (a caught statement_timeout
    // was delayed for ever: adversary 68).
    if (passingStatus(stored.status) && transaction.lastError === undefined) {
      throw new RetryLaterError(why, Number(stored.headers['retry-after'] ?? 1));
    }
    // A fault of the job's (a statement failed and it went on): its own error, for BullMQ's
    // attempts.
    throw new Error(why);
  }
}

/**
 * The class of a provider's instance, as `@nestjs/bullmq` tells it (its `registerWorkers`): a
 * factory provider's `metatype` is its factory and a value provider's is null, while both are
 * processors that BullMQ's module runs (adversary 74).
 */
function providerClassOf(wrapper: {
  metatype?: unknown;
  inject?: unknown;
  instance?: unknown;
}): unknown {
  if (wrapper.metatype && !wrapper.inject) return wrapper.metatype;
  const instance = wrapper.instance;
  return instance && typeof instance === 'object' ? instance.constructor : undefined;
}

/** The errors a job's work threw (see `afterJobError`: its own, for BullMQ's attempts). */
const THROWN_BY_WORK = new WeakSet<object>();

/**
 * The errors of the library's own statements that reach the job through its work (a step's
 * commit as the job moves itself: adversary 56's outage), which stay the library's: delayed,
 * no attempt counted, as at the claim or the final commit.
 */
const THROWN_BY_LIBRARY = new WeakSet<object>();

/** What `runStepped` goes on with. */
interface SteppedRun {
  context: IdempotencyContext;
  /** The job as its steps name their key's owner (`stepOwnerOf`). */
  owner: string;
  transaction: RequestTransaction;
  tools: OwnerTools;
  stepped: SteppedJob;
  fingerprint: Buffer;
  stopHeartbeat: (() => void) | undefined;
  /** Its step's commit, once it began. */
  step(): Promise<void> | undefined;
  /** The library's refusal of its answer, with its cause. */
  refusal(): Error | undefined;
  route: ResolvedJobOptions['route'];
}

/**
 * The statement that commits a job's step (see `RELEASE_JOB_STEP`): its lease ended, the job
 * named the key's owner, and its held data kept with it (or none: BullMQ has its data).
 */
function stepStatement(context: IdempotencyContext, job: JobLike, owner: string, held: HeldData) {
  const claim = context.claim!;
  return {
    name: RELEASE_JOB_STEP.name,
    text: RELEASE_JOB_STEP.text,
    values: [
      claim.tenantId,
      claim.key,
      claim.lockVersion,
      claim.claimId,
      STEP_OWNER,
      owner,
      STEP_DATA,
      JSON.stringify(keptStepData(held, job.timestamp)),
    ],
  };
}

/**
 * A write to BullMQ of what a job's run held, kept with its committed result, that failed: the
 * job comes back (delayed, no attempt counted: its work is done) and its replay writes it.
 */
function heldNotWritten(where: string, error: unknown): RetryLaterError {
  return new RetryLaterError(
    `@IdempotentJob() on ${where}: the job's work committed, but its data could not be ` +
      `written to BullMQ (its replay writes it): ${messageOf(error)}`,
    1,
  );
}

/** The detail of the library's answer (its problem), or its text. */
function problemDetail(stored: StoredResponse): string {
  const text = stored.body.toString('utf8');
  try {
    const problem = JSON.parse(text) as { detail?: unknown };
    return typeof problem.detail === 'string' ? problem.detail : text;
  } catch {
    return text;
  }
}

/** The result a kept answer holds, or the library's refusal it holds instead. */
function resultOf(stored: StoredResponse): unknown {
  if (!isJobResult(stored)) throw new JobAnswerRefusedError(stored.body.toString('utf8'));
  try {
    return decodeJobResult(stored);
  } catch {
    throw new IdempotencyStoredResponseUnreadableError('it is not the JSON of a result');
  }
}

/** The library's answers that say "nothing kept, come back": 409 and 503. */
function passingStatus(status: number): boolean {
  return status === 409 || status === 503;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
