import { Inject, Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { DiscoveryService, MetadataScanner } from '@nestjs/core';
import { lastValueFrom } from 'rxjs';
import { publish } from '../events/idempotency-events.js';
import { computeFingerprint } from '../fingerprint/fingerprint.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from '../idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from '../shapes/idempotency-options.interface.js';
import { ClaimStores } from '../claim-stores.js';
import { IdempotencyDatabase } from '../data-layers/idempotency-database.js';
import { LeaseRenewals } from '../claim/lease-renewals.js';
import { POSTGRES_CLAIM_STORE } from '../idempotency-options.js';
import { type KeyScope, type TransactionalClaimStore } from '../shapes/claim-store.interface.js';
import { claimOrDecide } from '../http/claim-or-decide.js';
import { UNFINISHED_TICKS } from '../claim/postgres-statements.js';
import { problemResponse } from '../http/problem.js';
import { IdempotencyContext, idempotencyStorage } from '../transaction/idempotency-context.js';
import { transactionScope } from '../transaction/transaction-scope.js';
import { commitAnswer } from '../transaction/commit-answer.js';
import {
  headlessOwnerTools,
  type OwnerTools,
  rollBackAndRelease,
} from '../transaction/owner-tools.js';
import { IdempotencyKeyInProgressError } from '../shapes/idempotency.errors.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { IDEMPOTENT_TASK_OPTIONS } from '../shapes/idempotency.constants.js';
import { classMethods } from '../routes/class-methods.js';
import { IdempotentTaskUnscheduledError } from './task-errors.js';
import { bindTasks } from './task-registry.js';
import { scheduleOf, slotOf, type TaskSchedule } from './task-schedule.js';
import { slotKey } from './task-slot.js';
import { tickStorage } from './task-tick.js';
import {
  type IdempotentTaskOptions,
  type ResolvedTaskOptions,
  resolveTaskOptions,
} from './idempotent-task.options.js';

/** A tick's record holds no answer: nothing reads it but the replicas that skip the tick. */
const TICK_DONE: StoredResponse = { status: 200, headers: {}, body: Buffer.alloc(0) };
/** How many unfinished ticks one tick resumes, at most (the rest wait for the next tick). */
const RESUMED_PER_TICK = 5;

/** A task's method, as its ticks read it: its schedule, options and name, resolved once. */
interface Task {
  where: string;
  schedule: TaskSchedule;
  settings: ResolvedTaskOptions;
  tenant: string;
  fingerprint: Buffer;
}

/**
 * Runs `@IdempotentTask()` methods' ticks once across the app's replicas: each tick is claimed
 * by its task's name and scheduled time, as a request by its key, and its database work
 * commits with its record, so the replicas whose timers fired for the same time find it taken
 * and skip it. A tick left unfinished (its replica killed mid-tick) is resumed by a later tick
 * of the task once its lease ran out, after its last phase.
 */
@Injectable()
export class IdempotentTasks implements OnModuleInit {
  private readonly logger = new Logger('Idempotency');
  private readonly tools: OwnerTools;
  private readonly tasks = new WeakMap<object, Task>();

  constructor(
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
    private readonly stores: ClaimStores,
    private readonly database: IdempotencyDatabase,
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
  ) {
    this.tools = headlessOwnerTools(
      options,
      this.logger,
      new LeaseRenewals(this.logger),
      (error) => problemResponse(error),
      'schedule',
    );
  }

  /**
   * Binds every provider with an `@IdempotentTask()` method to this module, and checks each
   * such method has a schedule to key its ticks by: at start-up, before `@nestjs/schedule`
   * starts its timers (application bootstrap).
   */
  onModuleInit(): void {
    for (const wrapper of this.discovery.getProviders()) {
      const type: unknown = wrapper.metatype;
      const instance: unknown = wrapper.instance;
      if (typeof type !== 'function' || !instance || typeof instance !== 'object') continue;
      const methods = classMethods([type], (prototype) =>
        this.scanner.getAllMethodNames(prototype),
      );
      let found = false;
      for (const { handler, name } of methods) {
        const options = Reflect.getMetadata(IDEMPOTENT_TASK_OPTIONS, handler) as
          IdempotentTaskOptions | undefined;
        if (options === undefined) continue;
        this.taskOf(`${type.name}.${name}`, options, handler);
        found = true;
      }
      if (found) bindTasks(instance, this);
    }
  }

  private taskOf(where: string, options: IdempotentTaskOptions, method: object): Task {
    let task = this.tasks.get(method);
    if (task) return task;
    const schedule = scheduleOf(method);
    if (schedule.kind === 'none' || schedule.kind === 'timeout') {
      throw new IdempotentTaskUnscheduledError(where, schedule.kind === 'timeout');
    }
    const settings = resolveTaskOptions(options, where, this.options.route);
    const name = settings.name ?? schedule.name ?? where;
    task = {
      where,
      schedule,
      settings,
      tenant: `schedule:${name}`,
      // The task's name: a tick of another method under the same name is the same task's.
      fingerprint: computeFingerprint({ method: 'TICK', path: name, headers: [], body: '' }),
    };
    this.tasks.set(method, task);
    return task;
  }

  /**
   * One tick of `method` (its `@IdempotentTask()` wrapper), fired now: runs `work` for its
   * slot unless another replica has, then resumes the task's unfinished earlier ticks. What
   * the tick's own run throws is thrown (`@nestjs/schedule` logs it).
   */
  async tick(
    where: string,
    options: IdempotentTaskOptions,
    method: object,
    work: () => unknown,
  ): Promise<void> {
    const task = this.taskOf(where, options, method);
    const slot = await slotOf(task.schedule, Date.now());
    if (slot === undefined) {
      this.logger.warn(`a tick of ${where} fired with no scheduled time before it: skipped`);
      return;
    }
    const key = slotKey(slot);
    try {
      await this.runSlot(task, key, false, work);
    } finally {
      await this.resumeLeftovers(task, slot, work);
    }
  }

  /** Resumes the task's unfinished ticks older than `slot` (within `resumeWithinMs`). */
  private async resumeLeftovers(task: Task, slot: number, work: () => unknown): Promise<void> {
    let keys: string[];
    try {
      const rows = await this.database.query<{ key: string }>(UNFINISHED_TICKS, [
        task.tenant,
        slotKey(slot - task.settings.resumeWithinMs),
        slotKey(slot),
        RESUMED_PER_TICK,
      ]);
      keys = rows.rows.map((row) => row.key);
    } catch (error) {
      this.logger.warn(
        `${task.where}: its unfinished ticks could not be read: ${messageOf(error)}`,
      );
      return;
    }
    for (const key of keys) {
      try {
        await this.runSlot(task, key, true, work);
      } catch (error) {
        this.logger.error(`${task.where}: the resumed tick of ${key} failed: ${messageOf(error)}`);
      }
    }
  }

  /**
   * Runs `work` for the tick of `key` if this replica claims it (a new tick, or one whose
   * lease ran out); another replica's tick, running or done, is skipped.
   */
  private async runSlot(
    task: Task,
    key: string,
    resuming: boolean,
    work: () => unknown,
  ): Promise<void> {
    const { route } = task.settings;
    const scope: KeyScope = { tenantId: task.tenant, key };
    const store = this.stores.get(POSTGRES_CLAIM_STORE) as TransactionalClaimStore;
    const began = performance.now();
    const event = () => ({
      route: task.where,
      tenant: scope.tenantId,
      key,
      durationMs: performance.now() - began,
    });
    await this.database.ready();
    let claimed;
    try {
      claimed = await lastValueFrom(
        claimOrDecide(
          store,
          scope,
          task.fingerprint,
          route.leaseMs,
          event,
          this.logger,
          route.conflictRetryAfterSeconds,
        ),
      );
    } catch (error) {
      // Another replica runs it now: its tick, not this one's.
      if (error instanceof IdempotencyKeyInProgressError) return;
      throw error;
    }
    if (claimed.kind === 'replay') {
      publish('replayed', () => ({ ...event(), status: 200, fromMemory: false }));
      return;
    }
    let refusal: Error | undefined;
    const tools: OwnerTools = {
      ...this.tools,
      problem: (error) => {
        refusal = error;
        return this.tools.problem(error);
      },
    };
    const transaction = this.database.transaction(false);
    transaction.isolationLevel = route.isolationLevel;
    const context = new IdempotencyContext(claimed.claim, 200, transaction, true, store);
    context.route = task.where;
    const stopHeartbeat = route.heartbeat
      ? this.tools.renewals.heartbeat(store, claimed.claim, transaction)
      : undefined;
    const tick = {
      task: task.tenant.slice('schedule:'.length),
      slot: new Date(key),
      resumed: resuming,
    };
    try {
      await idempotencyStorage.run(context, () =>
        transactionScope.run(transaction, () =>
          tickStorage.run(tick, () => {
            // From here its database work joins the tick's transaction.
            context.startHandler();
            return Promise.resolve(work());
          }),
        ),
      );
    } catch (error) {
      stopHeartbeat?.();
      // Nothing of a failed tick is kept: its work rolled back, its key given back, forgotten
      // where no phase of it committed (a later tick resumes one that has).
      const cause = transaction.failureOf(error);
      await rollBackAndRelease(tools, context, 'task_failed', true);
      throw cause;
    }
    stopHeartbeat?.();
    const stored = await commitAnswer(tools, context, task.fingerprint, TICK_DONE, false);
    if (stored === TICK_DONE) return;
    const cause = (refusal as { cause?: unknown } | undefined)?.cause;
    const detail = cause instanceof Error ? cause.message : stored.body.toString('utf8');
    throw new Error(`the tick of ${key} did not commit, nothing of it was kept: ${detail}`);
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
