import { randomBytes } from 'node:crypto';
import { Queue } from 'bullmq';
import fc from 'fast-check';
import pg from 'pg';
import { startWorker, type WorkerProcess } from '../support/worker-process.js';
import {
  asMessage,
  deliveryFaultArbitrary,
  describePlan,
  withoutCursorDrops,
} from './consumer-runner.js';
import { checkLeftRunning } from './delivery-check.js';
import { FUZZ_DDL } from './fuzz-app.js';
import { type Delivery } from './fuzz-consumer.js';
import { JOB_OPTIONS, type JobResult } from './fuzz-job.js';
import { type Fault, type FuzzOptions, type FuzzReport } from './fuzz-runner.js';
import { checkJobAgain, checkJobs, type JobRecord, type JobSeen } from './job-check.js';
import {
  describeProgram,
  expectedOutcome,
  type HandlerProgram,
  type Op,
  programCaseArbitrary,
} from './handler-program.js';

/**
 * The fuzzer on BullMQ jobs (transport `bullmq`): each generated program (phases included) is
 * added to a queue under its id as the job's id, run by an `@IdempotentJob()` processor keyed
 * by the program (`fuzz-job.ts`, in a process of its own), with BullMQ's attempts and backoff.
 * The faults a job meets, as a consumer's: the app's connections terminated this long after
 * the job began (on its first run, then the next, in the plan's order), a statement timeout
 * on the first run of a copy, a copy added under another job id at once (the same intent
 * enqueued twice), SIGKILL of the worker's process (BullMQ's stall check brings its jobs back
 * to the restarted one), and a crowd of other programs' jobs. Then one more job of each key,
 * once its jobs settled. Each key is checked by `checkJobs()` and `checkJobAgain()`.
 */

/** How many other programs a crowd adds beside the program (each its own id, one slot). */
const CROWD = 5;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(check: () => Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) return false;
    await sleep(50);
  }
  return true;
}

export async function fuzzJobs(options: FuzzOptions): Promise<FuzzReport> {
  const began = Date.now();
  const layer = options.layer ?? 'typeorm';
  const budgetMs = options.budgetMs ?? 40_000;
  const redisUrl = options.redisUrl ?? process.env.REDIS_URL ?? 'redis://127.0.0.1:6379';
  const admin = new pg.Pool({ connectionString: options.databaseUrl, max: 2 });
  admin.on('error', () => undefined);
  await admin.query(FUZZ_DDL);
  if (options.defaultSerializable) {
    const name = decodeURIComponent(new URL(options.databaseUrl).pathname.slice(1));
    await admin.query(
      `ALTER DATABASE "${name}" SET default_transaction_isolation = 'serializable'`,
    );
  }
  const name = `fuzz-${layer}-${options.seed}-${randomBytes(3).toString('hex')}`;
  const { hostname, port } = new URL(redisUrl);
  const queue = new Queue<Delivery, JobResult>(name, {
    connection: { host: hostname, port: Number(port) },
  });

  const cases: [Omit<HandlerProgram, 'id'>, Fault[]][] = options.program
    ? [[options.program.program, options.program.faults]]
    : fc.sample(
        fc.tuple(
          programCaseArbitrary({ phases: true }),
          fc.array(deliveryFaultArbitrary(options.sigkills), { maxLength: 3 }),
        ),
        { seed: options.seed, numRuns: options.runs },
      );
  const report: FuzzReport = {
    seed: options.seed,
    layer,
    transport: 'bullmq',
    programs: 0,
    crowdPrograms: 0,
    attempts: 0,
    faults: {},
    chains: {},
    outcomes: { ok: 0, error: 0, aborted: 0, refused: 0 },
    ops: {},
    violations: [],
    seconds: 0,
  };
  const start = () =>
    startWorker(
      'test/fuzz/fuzz-worker.js',
      {
        DATABASE_URL: options.databaseUrl,
        LAYER: layer,
        TRANSPORT: 'bullmq',
        QUEUE: name,
        REDIS_URL: redisUrl,
        PLAIN_JOBS: options.plainJobs ? '1' : '0',
        DEFAULT_SERIALIZABLE: options.defaultSerializable ? '1' : '0',
      },
      90_000,
    );
  let worker: WorkerProcess = await start();
  const reproduce = (index: number) =>
    `FUZZ_LAYER=${layer} FUZZ_TRANSPORT=bullmq FUZZ_SEED=${options.seed} FUZZ_RUNS=${options.runs} FUZZ_ONLY=${index}` +
    `${options.sigkills ? '' : ' FUZZ_SIGKILL=0'}${options.defaultSerializable ? ' FUZZ_DEFAULT_SERIALIZABLE=1' : ''} npm run fuzz`;

  /** The job ids added per key (a program's id), in order. */
  const added = new Map<string, string[]>();
  const add = async (
    subject: HandlerProgram,
    id: string,
    faults: Omit<Delivery, 'program'> = {},
  ) => {
    await queue.add('program', { program: subject, ...faults }, { ...JOB_OPTIONS, jobId: id });
    added.set(subject.id, [...(added.get(subject.id) ?? []), id]);
  };
  const seen = async (id: string): Promise<JobSeen> => {
    const job = await queue.getJob(id);
    if (!job) return { id, state: 'missing' };
    const state = await job.getState();
    return {
      id,
      state,
      ...(state === 'completed' ? { result: job.returnvalue } : {}),
      ...(state === 'failed' ? { failedReason: job.failedReason } : {}),
    };
  };
  const settled = async (subjects: HandlerProgram[]) => {
    for (const subject of subjects) {
      for (const id of added.get(subject.id) ?? []) {
        const { state } = await seen(id);
        if (state !== 'completed' && state !== 'failed') return false;
      }
    }
    return true;
  };

  try {
    for (const [index, [generated, drawn]] of cases.entries()) {
      if (options.only !== undefined && index !== options.only) continue;
      const program = asMessage(
        { id: `s${options.seed}-p${index}`, ...generated },
        Boolean(options.defaultSerializable),
      );
      const plan = withoutCursorDrops(layer, program, drawn);
      const crowd: HandlerProgram[] = plan.some((fault) => fault.kind === 'crowd')
        ? Array.from({ length: CROWD }, (_, i) => ({
            ...program,
            id: `${program.id}~${i}`,
            key: program.id,
          }))
        : [];
      const subjects = [program, ...crowd];
      const drops = plan.flatMap((fault) =>
        fault.kind === 'drop-connections' ? [fault.afterMs] : [],
      );

      let deadline = Date.now() + budgetMs;
      let crowdAdded = false;
      for (let attempt = 0; attempt < Math.max(1, plan.length); attempt++) {
        const fault = plan[attempt] ?? { kind: 'none' };
        report.faults[fault.kind] = (report.faults[fault.kind] ?? 0) + 1;
        report.attempts += 1;
        if (attempt === 0) {
          await add(program, program.id, {
            dropAfterMs: drops,
            statementTimeoutMs: fault.kind === 'statement-timeout' ? fault.ms : undefined,
          });
        } else if (fault.kind === 'statement-timeout') {
          await add(program, `${program.id}+t${attempt}`, { statementTimeoutMs: fault.ms });
        }
        if (fault.kind === 'race') await add(program, `${program.id}+r${attempt}`);
        if (fault.kind === 'crowd' && !crowdAdded) {
          crowdAdded = true;
          for (const member of crowd) await add(member, member.id);
        }
        if (fault.kind === 'sigkill') {
          await sleep(fault.afterMs);
          const restart = Date.now();
          await worker.kill();
          worker = await start();
          deadline += Date.now() - restart;
        }
        // The job settles (or hangs) before the next fault.
        await waitFor(() => settled([program]), 5000);
      }
      await waitFor(() => settled(subjects), Math.max(0, deadline - Date.now()));
      // Work left running lands a moment after the commit; then what each key left, and one
      // more job of each.
      await sleep(150);
      const model = expectedOutcome(program, { lazySavepoints: layer !== 'typeorm' });
      const inspect = async (subject: HandlerProgram): Promise<JobRecord> => ({
        model,
        jobs: await Promise.all((added.get(subject.id) ?? []).map(seen)),
        applied: await appliedOf(admin, subject.id),
      });
      const before = new Map<string, JobRecord>();
      for (const subject of subjects) before.set(subject.id, await inspect(subject));
      for (const subject of subjects) await add(subject, `${subject.id}+again`);
      await waitFor(() => settled(subjects), budgetMs);

      for (const subject of subjects) {
        if (subject.id.includes('~')) report.crowdPrograms += 1;
        else report.programs += 1;
        report.outcomes[model.kind] += 1;
        const first = before.get(subject.id)!;
        const after = await inspect(subject);
        const mayLose = plan.some(
          (fault) => fault.kind === 'sigkill' || fault.kind === 'drop-connections',
        );
        const violations = [
          ...checkJobs(first),
          ...checkJobAgain(first, after),
          ...checkLeftRunning(model, await landedOf(admin, subject.id), {
            mayLose,
            acknowledged: first.jobs.some((job) => job.state === 'completed'),
          }),
        ];
        for (const what of violations) {
          const violation = {
            index,
            program: `${subject.id} ${describeProgram(subject.ops)}`,
            faults: describePlan(plan),
            what,
            reproduce: reproduce(index),
          };
          report.violations.push(violation);
          options.log?.(
            `VIOLATION #${index} [${violation.program}] faults [${violation.faults}]: ${what}` +
              worker
                .output()
                .split('\n')
                .filter((line) => line && !line.startsWith('listening on'))
                .slice(-8)
                .map((line) => `\n    | ${line.slice(0, 300)}`)
                .join(''),
          );
        }
      }
      const bookings = await admin.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM fuzz_bookings WHERE slot = $1',
        [program.id],
      );
      if (bookings.rows[0].n > 1 && !levelBeforeLock(program.ops)) {
        report.violations.push({
          index,
          program: `${program.id} ${describeProgram(program.ops)}`,
          faults: describePlan(plan),
          what: `${bookings.rows[0].n} bookings of one slot under the advisory lock`,
          reproduce: reproduce(index),
        });
      }
    }
  } finally {
    await worker.kill();
    await queue.obliterate({ force: true }).catch(() => undefined);
    await queue.close().catch(() => undefined);
    await admin.end();
  }
  report.seconds = Math.round((Date.now() - began) / 100) / 10;
  return report;
}

/**
 * A level asked by a nested transaction before a lock-then-check: it begins the job's
 * transaction at that level, and the check reads its one snapshot (transactions.md says so and
 * what to do; the fuzzer's seed 3015 on routes): two copies may both book, a stated limit.
 */
function levelBeforeLock(ops: Op[]): boolean {
  const level = ops.findIndex((op) => op.op === 'tx' && op.isolation !== undefined);
  const lock = ops.findIndex((op) => op.op === 'lock');
  return level >= 0 && lock > level;
}

/** The effect rows of a program, by path (`path×n` when applied n times). */
async function appliedOf(admin: pg.Pool, id: string): Promise<string[]> {
  const { rows } = await admin.query<{ path: string; n: number }>(
    'SELECT path, count(*)::int AS n FROM fuzz_effects WHERE program = $1 GROUP BY path ORDER BY path',
    [id],
  );
  return rows.map((row) => (row.n === 1 ? row.path : `${row.path}×${row.n}`));
}

/** What the work a program left running wrote, by path. */
async function landedOf(admin: pg.Pool, id: string): Promise<string[]> {
  const { rows } = await admin.query<{ path: string; n: number }>(
    'SELECT path, count(*)::int AS n FROM fuzz_later WHERE program = $1 GROUP BY path ORDER BY path',
    [id],
  );
  return rows.map((row) => (row.n === 1 ? row.path : `${row.path}×${row.n}`));
}
