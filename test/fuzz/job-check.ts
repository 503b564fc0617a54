import { type JobResult } from './fuzz-job.js';
import { type Outcome } from './handler-program.js';

/** One BullMQ job of a program's key, as the queue has it once the runner stopped waiting. */
export interface JobSeen {
  id: string;
  /** BullMQ's state of it (`completed`, `failed`, or still `active`, `delayed`, `waiting`…). */
  state: string;
  /** Its result, when completed. */
  result?: JobResult;
  /** Why it failed, when it did. */
  failedReason?: string;
}

/** What a program's key left: its jobs (the first and any added beside it), and the database's side. */
export interface JobRecord {
  /** The model of the program the jobs carry. */
  model: Outcome;
  /** Every job added under the key so far, the first first. */
  jobs: JobSeen[];
  /** The effect rows of the program, by path (`path×n` when applied n times). */
  applied: string[];
}

const show = (jobs: JobSeen[]) =>
  jobs
    .map((job) => `${job.id} ${job.state}${job.failedReason ? ` (${job.failedReason})` : ''}`)
    .join('; ');

/**
 * The violations in one key's jobs, none when it is right. Every job of the key settles
 * (completed or failed); a program that succeeds completes each of its jobs with the one
 * result of the run that committed (another run's result is a second run), its effects
 * applied exactly once; one that fails on its own (its model an error or an aborted
 * transaction) fails every job, with no effect applied but those its phases committed
 * before it failed (once, however many attempts). What the library may refuse (a session
 * lock, a cursor) may fail too, then with nothing applied but its phases'.
 */
export function checkJobs(record: JobRecord): string[] {
  const { model, jobs, applied } = record;
  const violations: string[] = [];
  const unsettled = jobs.filter((job) => job.state !== 'completed' && job.state !== 'failed');
  if (unsettled.length) {
    violations.push(
      `${jobs.length - unsettled.length} of ${jobs.length} jobs settled: ${show(jobs)}`,
    );
  }
  const completed = jobs.filter((job) => job.state === 'completed');
  const failed = jobs.filter((job) => job.state === 'failed');
  const runs = new Set(completed.map((job) => job.result?.run));
  if (runs.size > 1) violations.push(`completed with ${runs.size} runs' results: ${show(jobs)}`);
  const shown = `[${applied.join(',')}]`;
  const durable = (model.kind === 'refused' ? [] : (model.durable ?? [])).slice().sort();
  const refusable = model.kind !== 'refused' && model.refusable === true;
  if (model.kind === 'ok') {
    const wanted = [...model.writes].sort();
    if (failed.length && !refusable) violations.push(`failed: ${show(failed)}`);
    if (completed.length && applied.join(',') !== wanted.join(',')) {
      violations.push(`completed with effects ${shown}, the model wants [${wanted.join(',')}]`);
    }
    if (!completed.length && failed.length && applied.join(',') !== durable.join(',')) {
      violations.push(`failed with effects ${shown}, the model wants [${durable.join(',')}]`);
    }
    return violations;
  }
  if (completed.length) {
    violations.push(`completed, the model wants it failed (${model.kind}): ${show(completed)}`);
  }
  if (applied.join(',') !== durable.join(',')) {
    violations.push(`effects ${shown} applied, the model wants [${durable.join(',')}]`);
  }
  return violations;
}

/**
 * A job added under a key once its jobs settled: it changes nothing, and completes with the
 * first result when the key's jobs completed (when they failed, it runs the program again,
 * which fails again, its phases not again). `before` is what the key left, `after` the same
 * with the job last.
 */
export function checkJobAgain(before: JobRecord, after: JobRecord): string[] {
  const violations: string[] = [];
  const first = before.jobs.find((job) => job.state === 'completed');
  const was = before.applied.join(',');
  const is = after.applied.join(',');
  // A refusal is not kept: once refused, a later job may run it through.
  const { model } = before;
  const mayRun = !first && model.kind === 'ok' && model.refusable;
  if (was !== is && !mayRun) {
    violations.push(`a later job changed its effects: [${was}], then [${is}]`);
  }
  const again = after.jobs.at(-1)!;
  if (first && (again.state !== 'completed' || again.result?.run !== first.result?.run)) {
    violations.push(
      `a later job was ${again.state}${again.result ? ` with run ${again.result.run}` : ''}, not completed with the first run (${first.result?.run})`,
    );
  }
  return violations;
}
