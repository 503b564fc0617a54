import { randomUUID } from 'node:crypto';
import { BullModule, Processor, WorkerHost } from '@nestjs/bullmq';
import { type Type } from '@nestjs/common';
import { type Job } from 'bullmq';
import { IdempotentJob } from '../../lib/index.js';
import { type Delivery, dropperOf, type ProgramRunner } from './fuzz-consumer.js';

/**
 * The fuzzer's BullMQ processor: the same handler programs, run as jobs by an
 * `@IdempotentJob()` processor keyed by the program's id (so that a copy added under another
 * job id is the same intent), with BullMQ's attempts and its stall checks short enough that a
 * SIGKILLed worker's jobs come back within seconds. Each run's result carries an id of its
 * own: a job completed with another run's result than the one that committed ran twice.
 */

/** Attempts BullMQ gives a job (a program that throws fails after them). */
export const JOB_ATTEMPTS = 3;

/** The job options the runner adds its jobs with. */
export const JOB_OPTIONS = {
  attempts: JOB_ATTEMPTS,
  backoff: { type: 'fixed', delay: 50 },
} as const;

/** What a job's run returns: its run's own id. */
export interface JobResult {
  run: string;
}

/** The worker's lock, renewed while a job runs; a killed worker's jobs stall once it lapses. */
const LOCK_MS = 3_000;

export function jobModulesOf(queue: string, redisUrl: string) {
  const { hostname, port } = new URL(redisUrl);
  return [
    BullModule.forRoot({ connection: { host: hostname, port: Number(port) } }),
    BullModule.registerQueue({ name: queue }),
  ];
}

/** The worker's settings: short stall checks, many stalls allowed (see above). */
const WORKER = {
  concurrency: 8,
  lockDuration: LOCK_MS,
  stalledInterval: 1_000,
  // Several SIGKILLs may stall one job: each is BullMQ's to bring back, not to fail.
  maxStalledCount: 10,
};

/**
 * The processor, under `@IdempotentJob()`; `plain`, the same without it (the control: what
 * BullMQ alone does with the same faults).
 */
export function jobProcessorOf(
  interpreter: ProgramRunner,
  databaseUrl: string,
  applicationName: string,
  queue: string,
  plain = false,
): Type<WorkerHost> {
  const drop = dropperOf(databaseUrl, applicationName);
  /** Runs of each job in this process: the statement timeout bites on the job's first only. */
  const runs = new Map<string, number>();
  const run = async (job: Job<Delivery>): Promise<JobResult> => {
    const id = String(job.id);
    const n = runs.get(id) ?? 0;
    runs.set(id, n + 1);
    const first = n === 0 && job.attemptsMade === 0 && !job.stalledCounter;
    await drop(job.data, id);
    await interpreter.run(job.data.program, first ? (job.data.statementTimeoutMs ?? 0) : 0);
    return { run: randomUUID() };
  };

  if (plain) {
    @Processor(queue, WORKER)
    class PlainProcessor extends WorkerHost {
      process(job: Job<Delivery>): Promise<JobResult> {
        return run(job);
      }
    }
    return PlainProcessor;
  }

  @Processor(queue, WORKER)
  class ProgramProcessor extends WorkerHost {
    // Keyed by the program, whatever the job id; its faults are not the intent.
    @IdempotentJob({
      key: (job) => (job.data as Delivery).program.id,
      fingerprint: (job) => (job.data as Delivery).program,
    })
    process(job: Job<Delivery>): Promise<JobResult> {
      return run(job);
    }
  }
  return ProgramProcessor;
}
