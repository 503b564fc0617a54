/**
 * Adversary 59: an `@IdempotentTask()` `@Cron()` method on a provider registered by
 * `useFactory` or `useValue`, or on a controller: start-up passes, `@nestjs/schedule` ticks
 * it, and every tick fails with "IdempotencyModule is not imported in this app", which it is.
 * The task never runs.
 *
 * The app: imports `ScheduleModule.forRoot()` and `IdempotencyModule.forRoot({ pool })`; its
 * task class `Settle` (`@Cron('* * * * * *')` + `@IdempotentTask()`) is provided as
 * `{ provide: Settle, useFactory: (pool) => new Settle(pool), inject: [...] }` (or
 * `useValue: new Settle(pool)`), or the scheduled method sits on a `@Controller()` class.
 * All three are ticked by `@nestjs/schedule`: its explorer (schedule.explorer.js `explore`)
 * walks `getControllers()` and `getProviders()` and scans each wrapper's INSTANCE prototype.
 *
 * What happens: `IdempotentTasks.onModuleInit` (lib/tasks/idempotent-tasks.service.ts) walks
 * only `discovery.getProviders()` and scans each wrapper's METATYPE (`classMethods([type])`):
 * for `useFactory` that is the factory (an arrow function: no prototype, skipped), for
 * `useValue` it is null (skipped), and controllers are not walked. So the instance is never
 * bound (`bindTasks`), nor its schedule checked; each tick's wrapper
 * (lib/tasks/idempotent-task.decorator.ts) finds no runner (`taskRunnerOf(this)`), logs and
 * throws `IdempotentTaskUnboundError`: "IdempotencyModule is not imported in this app, so its
 * ticks cannot be run once across replicas: import IdempotencyModule.forRoot(...)". The
 * operator looks for a missing import that is there; the task never runs; nothing fails at
 * start-up.
 *
 * Expected: each such task's ticks run once (its instance bound as a class provider's is),
 * or start-up refuses with words that say what is wrong (where the task sits).
 *
 * Control: the same class as a class provider (`providers: [Settle]`) runs every second.
 *
 * Severity: medium (a task that never runs, loudly but with wrong words; start-up that should
 * refuse does not).
 *
 * Fixed: every static provider (class, factory or value) and controller of the app is scanned
 * by its instance, as `@nestjs/schedule` scans them.
 */
import { Controller, Inject, Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { type Pool } from 'pg';
import { IdempotentTask } from '../../../lib/index.js';
import {
  activePool,
  recordTick,
  sleep,
  startAdv59App,
  TICKS_POOL,
} from '../../support/adv59-app.js';
import { useTaskReplicas } from '../../support/task-replicas.js';

@Injectable()
class Settle {
  constructor(@Inject(TICKS_POOL) private readonly pool?: Pool) {}
  @Cron('* * * * * *')
  @IdempotentTask({ name: 'settle' })
  settle() {
    return recordTick(this.pool ?? activePool(), 'settle');
  }
}

@Controller()
class SettleController {
  constructor(@Inject(TICKS_POOL) private readonly pool: Pool) {}
  @Cron('* * * * * *')
  @IdempotentTask({ name: 'settle' })
  settle() {
    return recordTick(this.pool, 'settle');
  }
}

const NOT_IMPORTED = 'IdempotencyModule is not imported in this app';

describe('adversary 59: @IdempotentTask() on a factory/value provider or a controller', () => {
  const replicas = useTaskReplicas('adv59_unbound');
  beforeEach(() => replicas.reset());

  /**
   * Starts the app (or sees start-up refuse), runs it for `ms`; gives how many ticks ran,
   * whether start-up refused, and whether a tick said the module is not imported.
   */
  async function runFor(parts: Parameters<typeof startAdv59App>[1], ms: number) {
    const logs: string[] = [];
    let refused: string | undefined;
    try {
      const { close } = await startAdv59App(replicas, parts, logs);
      await sleep(ms);
      await close();
    } catch (error) {
      refused = (error as Error).message;
    }
    const runs = (await replicas.ticks()).length;
    return {
      ranOrRefused: runs >= 2 || refused !== undefined,
      saysNotImported: logs.some((line) => line.includes(NOT_IMPORTED)),
    };
  }

  const fine = { ranOrRefused: true, saysNotImported: false };

  it('control: a class provider runs every second', async () => {
    expect(await runFor({ providers: [Settle] }, 3_200)).toEqual(fine);
  }, 30_000);

  it.each<[string, Parameters<typeof startAdv59App>[1]]>([
    [
      'useFactory',
      {
        providers: [
          { provide: Settle, useFactory: (pool: Pool) => new Settle(pool), inject: [TICKS_POOL] },
        ],
      },
    ],
    [
      'useValue',
      {
        providers: [
          // Built by hand (its pool the app's, found as it ticks).
          { provide: Settle, useValue: new Settle() },
        ],
      },
    ],
    ['a controller', { controllers: [SettleController] }],
  ])(
    'a task on %s runs every second, or start-up refuses it with words',
    async (_how, parts) => {
      const outcome = await runFor(parts, 3_200);
      // Fails: start-up passes; every tick throws "IdempotencyModule is not imported in
      // this app" (it is) and the task never runs.
      expect(outcome).toEqual(fine);
    },
    30_000,
  );
});
