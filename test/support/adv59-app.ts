import {
  type DynamicModule,
  type INestApplicationContext,
  Module,
  type Type,
} from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { ScheduleModule } from '@nestjs/schedule';
import { Pool } from 'pg';
import { currentTick, IdempotencyModule } from '../../lib/index.js';
import { type TaskReplicas } from './task-replicas.js';

/** The node-postgres pool an adversary-59 task writes its rows through (the pool seam). */
export const TICKS_POOL = 'ADV59_TICKS_POOL';

/** A tick's row in `ticks` (test/support/task-replicas.ts): its slot and who ran it. */
export async function recordTick(pool: Pool, by: string): Promise<void> {
  await pool.query('INSERT INTO ticks (slot, replica, resumed) VALUES ($1, $2, $3)', [
    currentTick()?.slot ?? new Date(),
    by,
    currentTick()?.resumed ?? false,
  ]);
}

let active: Pool | undefined;

/** The pool of the app started last (for a task built by hand, outside Nest's injector). */
export function activePool(): Pool {
  if (!active) throw new Error('no adversary-59 app started');
  return active;
}

/** An app in this process: `@nestjs/schedule` and the library on the pool seam. */
export interface Adv59App {
  app: INestApplicationContext;
  pool: Pool;
  close(): Promise<void>;
}

/**
 * Starts an app context whose module has `providers` and `controllers` (`imports` too), the
 * pool given as TICKS_POOL; `logs` collects what Nest's logger says (errors and warnings).
 */
export async function startAdv59App(
  replicas: TaskReplicas,
  parts: {
    providers?: unknown[];
    controllers?: Type[];
    imports?: (Type | DynamicModule)[];
  },
  logs: string[] = [],
): Promise<Adv59App> {
  const pool = new Pool({ connectionString: replicas.url(), max: 4 });
  active = pool;
  @Module({
    imports: [
      ScheduleModule.forRoot(),
      IdempotencyModule.forRoot({ globalKeys: true, pool }),
      ...(parts.imports ?? []),
    ],
    providers: [{ provide: TICKS_POOL, useValue: pool }, ...((parts.providers ?? []) as Type[])],
    controllers: parts.controllers ?? [],
    exports: [TICKS_POOL],
  })
  class AppModule {}
  const say = (message: unknown) => void logs.push(String(message));
  let app: INestApplicationContext;
  try {
    app = await NestFactory.createApplicationContext(AppModule, {
      abortOnError: false,
      logger: { log() {}, error: say, warn: say, debug() {}, verbose() {}, fatal: say },
    });
  } catch (error) {
    await pool.end();
    throw error;
  }
  return {
    app,
    pool,
    async close() {
      await app.close();
      await pool.end();
    },
  };
}

export const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
