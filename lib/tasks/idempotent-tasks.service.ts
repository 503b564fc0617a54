import {
  type BeforeApplicationShutdown,
  Inject,
  Injectable,
  Logger,
  type OnModuleInit,
} from '@nestjs/common';
import { DiscoveryService, MetadataScanner, ModuleRef } from '@nestjs/core';
import { lastValueFrom } from 'rxjs';
import { publish, type Publish } from '../events/idempotency-events.js';
import { TICK_TENANT_PREFIX } from '../decisions/tenant-id.js';
import { computeFingerprint } from '../fingerprint/fingerprint.js';
import { RESOLVED_IDEMPOTENCY_OPTIONS } from '../idempotency.module-definition.js';
import { type ResolvedIdempotencyOptions } from '../shapes/idempotency-options.interface.js';
import { ClaimStores } from '../claim-stores.js';
import { IdempotencyDatabase } from '../data-layers/idempotency-database.js';
import { LeaseRenewals } from '../claim/lease-renewals.js';
import { POSTGRES_CLAIM_STORE } from '../idempotency-options.js';
import { type KeyScope, type TransactionalClaimStore } from '../shapes/claim-store.interface.js';
import { claimOrDecide } from '../http/claim-or-decide.js';
import {
  DATABASE_NOW,
  MARK_OCCURRENCE,
  READ_TICK_RECORD,
  UNFINISHED_TICKS,
} from '../claim/postgres-statements.js';
import { type ActiveClaim } from '../shapes/active-claim.js';
import { problemResponse } from '../http/problem.js';
import { IdempotencyContext, idempotencyStorage } from '../transaction/idempotency-context.js';
import { transactionScope } from '../transaction/transaction-scope.js';
import { commitAnswer } from '../transaction/commit-answer.js';
import { refusalAnswer } from '../transaction/failure.js';
import {
  headlessOwnerTools,
  type OwnerTools,
  rollBackAndRelease,
} from '../transaction/owner-tools.js';
import {
  IdempotencyKeyInProgressError,
  IdempotencyLeaseLostError,
  IdempotencyStoreUnavailableError,
} from '../shapes/idempotency.errors.js';
import { type StoredResponse } from '../shapes/stored-response.js';
import { IDEMPOTENT_TASK_OPTIONS } from '../shapes/idempotency.constants.js';
import { MAX_TENANT_ID_LENGTH } from '../decisions/tenant-id.js';
import { characterCount } from '../decisions/well-formed.js';
import {
  IdempotentTaskNameTakenError,
  IdempotentTaskOverrideError,
  IdempotentTaskNameTooLongError,
  IdempotentTaskUnboundError,
  IdempotentTaskPeriodError,
  IdempotentTaskSchedulesError,
  IdempotentTaskUnscheduledError,
} from './task-errors.js';
import { bindTasks, declaredTask, overriddenTask } from './task-registry.js';
import {
  cronTimeClass,
  type CronTimeLike,
  cronTimeSlot,
  cronTimeSlotEnd,
  cronZone,
  intervalTimeSlot,
  isTimerPeriod,
  scheduleOf,
  type TaskSchedule,
} from './task-schedule.js';
import { slotKey, tickRecordFinishedAt, untilSlot } from './task-slot.js';
import { currentTick, tickStorage } from './task-tick.js';
import { resumesAfterFailure, tickFailed } from './tick-failure.js';
import { type TickOutcome, tickOutcome, type TickRecordRead } from './tick-outcome.js';
import {
  type OccurrenceMark,
  marksOccurrence,
  occurrenceKey,
  occurrenceMarkFinishedAt,
  tickZoneVerdict,
  zoneWarning,
} from './tick-zone.js';
import {
  type IdempotentTaskOptions,
  type ResolvedTaskOptions,
  resolveTaskOptions,
} from './idempotent-task.options.js';

/** A tick's record holds no answer: nothing reads it but the replicas that skip the tick. */
const TICK_DONE: StoredResponse = { status: 200, headers: {}, body: Buffer.alloc(0) };
/** How many unfinished ticks one tick resumes, at most (the rest wait for the next tick). */
const RESUMED_PER_TICK = 5;
/** How long a tick whose COMMIT's answer was lost waits for its record to tell, at most. */
const MAX_OUTCOME_WAIT_MS = 30_000;
/** How often it reads its record meanwhile. */
const OUTCOME_READ_EVERY_MS = 100;
/** PostgreSQL's `lock_not_available`: a `NOWAIT` read met the row's lock. */
const LOCK_NOT_AVAILABLE = '55P03';

/** A task's method on one object, as its ticks read it: resolved once, at start-up. */
interface Task {
  where: string;
  schedule: TaskSchedule;
  settings: ResolvedTaskOptions;
  tenant: string;
  fingerprint: Buffer;
  /** Its schedule's `CronTime`, where `cron` made none the app can reach by name. */
  cronTime?: Promise<CronTimeLike>;
  /** The first `CronTime` its named job was read with: another is a `setTime`'s. */
  firstCronTime?: CronTimeLike;
}

/** A tick's slot (ms since the epoch) and its end: its schedule's next time, if it has one. */
interface Slot {
  slot: number;
  endMs: number | undefined;
}

/** `@nestjs/schedule`'s registry, by the shape the library reads of it. */
interface SchedulerRegistryLike {
  getCronJob(name: string): { cronTime: CronTimeLike };
  /** Node's `setInterval` handle of the interval of that name (its period: `_idleTimeout`). */
  getInterval(name: string): unknown;
}

/**
 * Runs `@IdempotentTask()` methods' ticks once across the app's replicas: each tick is claimed
 * by its task's name and scheduled time, as a request by its key, and its database work
 * commits with its record, so the replicas whose timers fired for the same time find it taken
 * and skip it. A tick left unfinished (its replica killed mid-tick) is resumed by a later tick
 * of the task once its lease ran out, after its last phase.
 */
@Injectable()
export class IdempotentTasks implements OnModuleInit, BeforeApplicationShutdown {
  private readonly logger = new Logger('Idempotency');
  private readonly tools: OwnerTools;
  /** Each object's tasks, by their methods (two objects of one class are two tasks). */
  private readonly tasks = new WeakMap<object, Map<object, Task>>();
  private registry: SchedulerRegistryLike | undefined;
  /** The ticks running now, waited for as the app shuts down (see `beforeApplicationShutdown`). */
  private readonly running = new Set<Promise<unknown>>();
  private closing = false;
  /** The waits of ticks for their slots (see `slotHasCome`), woken as shutdown begins. */
  private readonly waking = new Set<() => void>();

  constructor(
    @Inject(RESOLVED_IDEMPOTENCY_OPTIONS) private readonly options: ResolvedIdempotencyOptions,
    private readonly stores: ClaimStores,
    private readonly database: IdempotencyDatabase,
    private readonly discovery: DiscoveryService,
    private readonly scanner: MetadataScanner,
    private readonly moduleRef: ModuleRef,
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
   * Binds every object of the app with an `@IdempotentTask()` method (its providers, of any
   * form, and its controllers: all that `@nestjs/schedule` ticks) to this module, and checks
   * each such method has a schedule to key its ticks by and a name of its own: at start-up,
   * before `@nestjs/schedule` starts its timers (application bootstrap).
   */
  async onModuleInit(): Promise<void> {
    const names = new Map<string, string>();
    const wrappers = [...this.discovery.getProviders(), ...this.discovery.getControllers()];
    /** One object may stand under several tokens (`useExisting`): its tasks are its own once. */
    const seen = new Set<object>();
    for (const wrapper of wrappers) {
      const instance: unknown = wrapper.instance;
      if (!wrapper.isDependencyTreeStatic() || !instance || typeof instance !== 'object') continue;
      if (seen.has(instance)) continue;
      seen.add(instance);
      const prototype = Object.getPrototypeOf(instance) as object | null;
      if (!prototype) continue;
      const found = new Map<object, Task>();
      for (const name of this.scanner.getAllMethodNames(prototype)) {
        const method = (instance as Record<string, unknown>)[name];
        if (typeof method !== 'function') continue;
        // The library's wrapper, found by its name whatever wraps it (the method
        // `@nestjs/schedule` ticks may be another decorator's wrapper around it).
        // Else the method itself where it carries the options (a task copied onto the class,
        // TypeScript's `applyMixins`: its wrapper was declared on another prototype).
        const tick =
          declaredTask(instance, name) ??
          (Reflect.getMetadata(IDEMPOTENT_TASK_OPTIONS, method) !== undefined ? method : undefined);
        if (!tick) {
          const base = overriddenTask(instance, name);
          if (base && scheduleOf(method).kind !== 'none') {
            throw new IdempotentTaskOverrideError(`${instance.constructor.name}.${name}`, base);
          }
          continue;
        }
        const options = Reflect.getMetadata(IDEMPOTENT_TASK_OPTIONS, tick) as
          IdempotentTaskOptions | undefined;
        if (options === undefined) continue;
        // Its schedule where `@nestjs/schedule` reads it (the method it ticks), else below it.
        const ticked = scheduleOf(method).kind === 'none' ? tick : method;
        const task = this.taskOf(`${instance.constructor.name}.${name}`, options, ticked);
        const warning = zoneWarning(task.schedule, task.where, processZone());
        if (warning) this.logger.warn(warning);
        const other = names.get(task.tenant);
        if (other !== undefined) throw new IdempotentTaskNameTakenError(task, other);
        names.set(task.tenant, task.where);
        found.set(tick, task);
      }
      if (found.size === 0) continue;
      this.tasks.set(instance, found);
      bindTasks(instance, this);
    }
    if (names.size > 0) this.registry = await this.schedulerRegistry();
  }

  /** `@nestjs/schedule`'s registry of the app (its jobs as they run now, `setTime` too). */
  private async schedulerRegistry(): Promise<SchedulerRegistryLike | undefined> {
    try {
      const { SchedulerRegistry } = await import('@nestjs/schedule');
      return this.moduleRef.get(SchedulerRegistry, { strict: false });
    } catch {
      return undefined;
    }
  }

  private taskOf(where: string, options: IdempotentTaskOptions, method: object): Task {
    const schedule = scheduleOf(method);
    if (schedule.kind === 'several')
      throw new IdempotentTaskSchedulesError(where, schedule.decorators);
    if (schedule.kind === 'none' || schedule.kind === 'timeout') {
      throw new IdempotentTaskUnscheduledError(where, schedule.kind === 'timeout');
    }
    if (schedule.kind === 'interval' && !isTimerPeriod(schedule.everyMs)) {
      throw new IdempotentTaskPeriodError(where, schedule.everyMs);
    }
    const settings = resolveTaskOptions(options, where, this.options.route);
    const name = settings.name ?? schedule.name ?? where;
    const tenant = `${TICK_TENANT_PREFIX}${name}`;
    if (characterCount(tenant) > MAX_TENANT_ID_LENGTH) {
      throw new IdempotentTaskNameTooLongError(where, name);
    }
    return {
      where,
      schedule,
      settings,
      tenant,
      // The task's name: a tick of another method under the same name is the same task's.
      fingerprint: computeFingerprint({ method: 'TICK', path: name, headers: [], body: '' }),
    };
  }

  /**
   * The slot of a tick of `task` fired at `nowMs`: by its cron job as it runs now (a job of
   * its name in `@nestjs/schedule`'s registry, rescheduled or not), else by its declared
   * schedule, in the zone cron reads it in.
   */
  private async slotOf(task: Task, nowMs: number): Promise<Slot | undefined> {
    const { schedule } = task;
    if (schedule.kind === 'interval') {
      const period = this.intervalPeriodOf(task);
      const slot = intervalTimeSlot({ ...schedule, everyMs: period }, nowMs);
      return slot === undefined ? undefined : { slot, endMs: slot + period };
    }
    if (schedule.kind !== 'cron') return undefined;
    const time = await this.cronTimeOf(task);
    const slot = cronTimeSlot(time, nowMs);
    return slot === undefined ? undefined : { slot, endMs: cronTimeSlotEnd(time, slot) };
  }

  /**
   * The end of an earlier slot of `task` (a tick resumed by a later one), by its schedule as
   * it runs now: its record is held past it as its own tick's is (adversary 88: a resumed
   * tick's record went `retentionMs` after it was resumed, and a replica behind ran its slot
   * again). `undefined` where it has none, or it cannot be told.
   */
  private async slotEndOf(task: Task, slotMs: number): Promise<number | undefined> {
    const { schedule } = task;
    if (schedule.kind === 'interval') return slotMs + this.intervalPeriodOf(task);
    if (schedule.kind !== 'cron') return undefined;
    try {
      return cronTimeSlotEnd(await this.cronTimeOf(task), slotMs);
    } catch {
      return undefined;
    }
  }

  /**
   * An `@Interval()` task's period as it runs now: a named interval's the registry's, re-added
   * with another period (@nestjs/schedule's dynamic intervals: deleteInterval, then addInterval
   * under the same name), as a named cron by its `setTime` (adversary 71).
   */
  private intervalPeriodOf(task: Task): number {
    const { schedule } = task;
    if (schedule.kind !== 'interval') throw new TypeError(`${task.where} is no interval`);
    const everyMs = schedule.name === undefined ? undefined : this.periodOf(schedule.name);
    return everyMs ?? schedule.everyMs;
  }

  /** A cron task's `CronTime` as it runs now (see `slotOf`). */
  private async cronTimeOf(task: Task): Promise<CronTimeLike> {
    const { schedule } = task;
    if (schedule.kind !== 'cron') throw new TypeError(`${task.where} is no cron`);
    let time: CronTimeLike | undefined;
    if (schedule.name !== undefined) {
      try {
        time = this.registry?.getCronJob(schedule.name).cronTime;
        if (time) task.firstCronTime ??= time;
      } catch {
        time = undefined;
      }
    }
    if (!time) {
      task.cronTime ??= cronTimeClass().then(
        (CronTime) =>
          new CronTime(schedule.cronTime as string | Date, schedule.timeZone, schedule.utcOffset),
      );
      time = await task.cronTime;
    }
    return time;
  }

  /**
   * The period of the registry's interval of `name`, read off Node's `setInterval` handle,
   * which keeps it as `_idleTimeout` (Node's own, stable since its first versions); undefined
   * where there is none to read.
   */
  private periodOf(name: string): number | undefined {
    try {
      const handle = this.registry?.getInterval(name) as { _idleTimeout?: unknown } | undefined;
      const period = handle?._idleTimeout;
      return typeof period === 'number' && period > 0 ? period : undefined;
    } catch {
      return undefined;
    }
  }

  /**
   * One tick of `method` of `instance` (its `@IdempotentTask()` wrapper), fired now: runs
   * `work` for its slot unless another replica has, then resumes the task's unfinished
   * earlier ticks. What the tick's own run throws is thrown (`@nestjs/schedule` logs it).
   */
  async tick(instance: object, method: object, work: () => unknown): Promise<void> {
    // A tick that fires as the app shuts down does not start: its slot is another replica's.
    if (this.closing) return;
    const running = this.tickNow(instance, method, work);
    this.running.add(running);
    try {
      await running;
    } finally {
      this.running.delete(running);
    }
  }

  /**
   * Waits for the ticks running now, before the app's database pool is ended (TypeORM ends its
   * own as the application shuts down, after this hook): a tick cut off from its pool could not
   * renew its lease while it runs, and another replica would take it over and run it again
   * beside it (adversary 63). A replica killed before they end leaves them to be resumed.
   */
  async beforeApplicationShutdown(): Promise<void> {
    this.closing = true;
    // A tick waiting for its slot by the database's clock has not begun: it ends now, and
    // runs nothing (adversary 68: a shutdown waited out a fast clock's wait).
    for (const wake of [...this.waking]) wake();
    await Promise.allSettled([...this.running]);
  }

  private async tickNow(instance: object, method: object, work: () => unknown): Promise<void> {
    const task = this.tasks.get(instance)?.get(method);
    if (!task) {
      // A base class's task called by its override's tick (`super.sync()`): part of that tick.
      if (this.tasks.has(instance) && currentTick()) {
        await work();
        return;
      }
      throw new IdempotentTaskUnboundError(instance.constructor.name);
    }
    const fired = await this.slotOf(task, Date.now());
    if (fired === undefined) {
      this.logger.warn(`a tick of ${task.where} fired with no scheduled time before it: skipped`);
      return;
    }
    const { slot } = fired;
    const come = await this.slotHasCome(task, slot);
    if (!come.run) return;
    const key = slotKey(slot);
    if (!(await this.zoneAgrees(task, slot, key))) return;
    try {
      await this.runSlot(task, key, false, work, fired.endMs, come.databaseNowMs);
    } finally {
      await this.resumeLeftovers(task, slot, work, come.databaseNowMs);
    }
  }

  /**
   * Whether the tick for `slot` goes on, by the database's clock (see `untilSlot`): it waits
   * where this replica's clock is ahead. A clock that cannot be read leaves it to the claim,
   * which meets the same database and says why. With the database's clock as read, before
   * anything of the tick: its record is held by it (see `finishedAtLeastMs`, set in `runSlot`).
   */
  private async slotHasCome(
    task: Task,
    slot: number,
  ): Promise<{ run: boolean; databaseNowMs?: number }> {
    let databaseNow: number;
    try {
      const { rows } = await this.database.query<{ now_ms: number }>(DATABASE_NOW, []);
      databaseNow = Number(rows[0].now_ms);
    } catch {
      return { run: true };
    }
    if (!Number.isFinite(databaseNow)) return { run: true };
    const decision = untilSlot(slot, databaseNow);
    if (decision.kind === 'run') return { run: true, databaseNowMs: databaseNow };
    if (decision.kind === 'skip') {
      this.logger.error(
        `${task.where}: this replica's clock is ${Math.round(decision.aheadMs)} ms ahead of ` +
          `the database's: the tick of ${slotKey(slot)} is skipped, not run before its time ` +
          `(set the clock right: NTP)`,
      );
      return { run: false };
    }
    await this.sleep(decision.ms);
    return { run: !this.closing, databaseNowMs: databaseNow };
  }

  /** Waits `ms`, or until shutdown begins (see `beforeApplicationShutdown`). */
  private sleep(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const wake = () => {
        clearTimeout(timer);
        this.waking.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.waking.add(wake);
    });
  }

  /**
   * Whether a cron task's tick of `slot` runs, by its occurrence's mark (see `tickZoneVerdict`):
   * refused, loudly, where a replica reading the schedule in another zone (another `TZ`, and
   * no `timeZone` on the `@Cron()`) fired for the same wall-clock time at another instant
   * (adversary 90: the night settled once per zone in the fleet). A mark that cannot be made
   * or read leaves it to the tick's claim, which meets the same database. A schedule that
   * declares its zone is neither marked nor checked (`marksOccurrence`, adversary 91).
   */
  private async zoneAgrees(task: Task, slot: number, key: string): Promise<boolean> {
    if (task.schedule.kind !== 'cron') return true;
    let zone: string;
    let marked: OccurrenceMark | undefined;
    try {
      const time = await this.cronTimeOf(task);
      if (time.realDate) return true;
      const { schedule } = task;
      const rescheduled =
        (task.firstCronTime !== undefined && time !== task.firstCronTime) ||
        String(time.source) !== String(schedule.cronTime);
      if (!marksOccurrence(schedule, time, rescheduled, processZone())) return true;
      zone = cronZone(time) ?? processZone();
      const { rows } = await this.database.query<{ zone: string | null; slot: string | null }>(
        MARK_OCCURRENCE,
        [
          task.tenant,
          occurrenceKey(slot, zone),
          task.fingerprint,
          zone,
          key,
          occurrenceMarkFinishedAt(slot, this.options.retentionMs),
        ],
      );
      const [row] = rows;
      marked = row?.zone && row.slot ? { zone: row.zone, slot: row.slot } : undefined;
    } catch {
      return true;
    }
    const verdict = tickZoneVerdict(zone, key, marked);
    if (verdict.kind === 'run') return true;
    this.logger.error(
      `${task.where}: the tick of ${key} (its schedule read in ${zone}) is skipped: a replica ` +
        `reading it in ${verdict.other.zone} ran the same time as ${verdict.other.slot}. ` +
        `Replicas must read a cron in one zone: set timeZone on the @Cron() (or the same TZ ` +
        `on every replica)`,
    );
    return false;
  }

  /**
   * Resumes the task's unfinished ticks older than `slot` (within `resumeWithinMs`), each
   * record held past its own slot's end as a tick's in its slot is (see `finishedAtLeastMs`, set in `runSlot`).
   */
  private async resumeLeftovers(
    task: Task,
    slot: number,
    work: () => unknown,
    databaseNowMs: number | undefined,
  ): Promise<void> {
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
      if (this.closing) return;
      try {
        const endMs = await this.slotEndOf(task, Date.parse(key));
        await this.runSlot(task, key, true, work, endMs, databaseNowMs);
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
    slotEndMs: number | undefined,
    databaseNowMs: number | undefined,
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
          undefined,
          skippedAsSuch,
        ),
      );
    } catch (error) {
      // Another replica runs it now: its tick, not this one's.
      if (error instanceof IdempotencyKeyInProgressError) return;
      throw error;
    }
    if (claimed.kind === 'replay') {
      publish('tickSkipped', () => ({ ...event(), reason: 'done' }));
      return;
    }
    // Its record held until its slot ends, by the statement that marks it done, in its own
    // COMMIT (done with its work, done with its failure, or found committed after its answer
    // was lost): never done without its hold (adversary 90: a hold sent after the COMMIT was
    // lost with its connection, and the purge let another replica run the slot again).
    claimed.claim.finishedAtLeastMs = tickRecordFinishedAt(
      slotEndMs,
      this.options.retentionMs,
      databaseNowMs,
    );
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
      task: task.tenant.slice(TICK_TENANT_PREFIX.length),
      slot: new Date(key),
      // Resumed: by a later tick (`resumeLeftovers`), or taken over as it was claimed (its
      // fencing token moved past the first claim's: another run of the tick began before).
      // (A pool may read the bigint as a number: compared as one.)
      resumed: resuming || Number(claimed.claim.lockVersion) !== 0,
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
      // As below: renewed until the statements its work left running are done.
      stopHeartbeat?.();
      const cause = transaction.failureOf(error);
      if (resumesAfterFailure(claimed.claim)) {
        // A phase of it committed (a call out made): its work rolled back, its key given back
        // with its phases, for a later tick to resume after them.
        await rollBackAndRelease(tools, context, 'task_failed');
      } else {
        // Nothing of it is kept but its failure, which is its answer: the replicas whose timers
        // fire for it later skip it, as they skip a tick that ran (adversary 60). So for a
        // refusal of the seam's never stored as a request's answer (`cursor_open`): no client
        // retries a tick after the fix, and given back it would run on every replica
        // (adversary 102); kept in the refusal's words.
        const failed = tickFailed(refusalAnswer(transaction.refusal) ?? cause);
        await commitAnswer(tools, context, task.fingerprint, failed, true, false, true);
      }
      throw cause;
    }
    // Renewed until the statements its work left running are done: its commit waits for them,
    // and a lease run out meanwhile would let another replica run the tick again before that
    // commit (see `heartbeatStop`).
    stopHeartbeat?.();
    // Its COMMIT refused (a deferred constraint, a serialization failure, the database gone)
    // is a failure of the tick, as a throw is: its key kept meanwhile (`keepsKey`: neither
    // given back for another replica to resume nor counted as released), its failure then
    // kept as its answer, on its own, so that no later tick resumes it (adversary 67: every
    // tick ran it again for resumeWithinMs; adversary 68: released, then stored). Unless a
    // phase committed: then given back to be resumed, three takeovers at most. A failure
    // that cannot be stored either (the database gone) gives the key back, to be resumed.
    const keeps = !resumesAfterFailure(claimed.claim);
    const stored = await commitAnswer(tools, context, task.fingerprint, TICK_DONE, false, keeps);
    if (stored === TICK_DONE) return;
    const cause = (refusal as { cause?: unknown } | undefined)?.cause;
    const detail = cause instanceof Error ? cause.message : stored.body.toString('utf8');
    // Its COMMIT's answer lost (a read timeout, the connection gone as it committed): it may
    // have committed, or still be committing. Its record says which, not the lost answer
    // (adversary 88: a tick that committed was said to have kept nothing; an operator who
    // believed it would run it again by hand).
    if (refusal instanceof IdempotencyStoreUnavailableError) {
      const outcome = await this.outcomeOf(claimed.claim, route.leaseMs);
      if (outcome === 'committed') {
        this.logger.warn(
          `${task.where}: the tick of ${key} committed, though its COMMIT's answer was lost ` +
            `(${detail}): its record says done`,
        );
        return;
      }
      if (outcome !== 'rolled-back') {
        // Its key kept as it is: done, if it committed; else resumed by a later tick once its
        // lease ran out, as a tick whose replica died.
        throw new Error(
          `the tick of ${key} may have committed: its COMMIT's answer was lost (${detail}), ` +
            `and its record could not say (keys show ${task.tenant} ${key}). If it did not, ` +
            `a later tick resumes it once its lease runs out`,
        );
      }
    }
    const failure = new Error(
      `the tick of ${key} did not commit, nothing of it was kept: ${detail}`,
    );
    if (keeps && !(refusal instanceof IdempotencyLeaseLostError)) {
      await commitAnswer(tools, context, task.fingerprint, tickFailed(failure), true, false, true);
    }
    throw failure;
  }

  /**
   * What became of a tick whose COMMIT's answer was lost, by its record (see `tickOutcome`):
   * read again while its COMMIT still runs on the server (its row locked), for at most its
   * lease (30 s at most); `unknown` if that does not tell.
   */
  private async outcomeOf(claim: ActiveClaim, leaseMs: number): Promise<TickOutcome> {
    const until = performance.now() + Math.min(leaseMs, MAX_OUTCOME_WAIT_MS);
    for (;;) {
      const outcome = tickOutcome(await this.readTickRecord(claim), claim);
      if (outcome !== 'in-flight') return outcome;
      if (performance.now() >= until || this.closing) return 'unknown';
      await new Promise((resolve) => setTimeout(resolve, OUTCOME_READ_EVERY_MS));
    }
  }

  private async readTickRecord(claim: ActiveClaim): Promise<TickRecordRead> {
    try {
      const { rows } = await this.database.query<{
        state: string;
        claim_id: string;
        lock_version: number | string;
      }>(READ_TICK_RECORD, [claim.tenantId, claim.key]);
      if (rows.length === 0) return { kind: 'none' };
      const [row] = rows;
      return {
        kind: 'row',
        state: row.state,
        claimId: row.claim_id,
        lockVersion: row.lock_version,
      };
    } catch (error) {
      if ((error as { code?: unknown }).code === LOCK_NOT_AVAILABLE) return { kind: 'locked' };
      return { kind: 'failed' };
    }
  }
}

/** The process's own zone, as `cron` reads a schedule without one in it. */
function processZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * A tick's claim events as they are: one replica claims it and the others skip it, which is
 * no conflict (an alert on 409s must not fire on every tick of every replica but one).
 */
const skippedAsSuch: Publish = (name, event) =>
  name === 'conflict'
    ? publish('tickSkipped', () => ({ ...event(), reason: 'running' }))
    : publish(name, event);
