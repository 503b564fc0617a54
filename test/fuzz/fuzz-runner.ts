import fc from 'fast-check';
import { Client } from 'pg';
import { startWorker, type WorkerProcess } from '../support/worker-process.js';
import {
  FUZZ_APPLICATION_NAME,
  FUZZ_DDL,
  OUTER_TIMEOUT_HEADER,
  STATEMENT_TIMEOUT_HEADER,
} from './fuzz-app.js';
import {
  describeProgram,
  expectedOutcome,
  type HandlerProgram,
  type Op,
  type Outcome,
  programArbitrary,
} from './handler-program.js';

/** A fault injected into one attempt of a program. */
export type Fault =
  | { kind: 'none' }
  /** A global `timeout()` interceptor answers 408 while the handler runs on. */
  | { kind: 'outer-timeout'; ms: number }
  /** Every connection of the app is terminated by the server, this long into the attempt. */
  | { kind: 'drop-connections'; afterMs: number }
  /** `SET LOCAL statement_timeout` first: a `pg_sleep` longer than it is cancelled. */
  | { kind: 'statement-timeout'; ms: number }
  /** Two copies of the attempt at once, as a double click sends them. */
  | { kind: 'race' }
  /** The app's process is killed with SIGKILL, this long into the attempt, and restarted. */
  | { kind: 'sigkill'; afterMs: number };

export interface FuzzOptions {
  /** The test database (created by the caller, the idempotency tables made by the app). */
  databaseUrl: string;
  seed: number;
  runs: number;
  /** Whether plans may kill the app's process (each costs a restart of a second or two). */
  sigkills: boolean;
  log?: (line: string) => void;
}

export interface Violation {
  index: number;
  program: string;
  faults: string;
  what: string;
}

export interface FuzzReport {
  seed: number;
  programs: number;
  attempts: number;
  faults: Record<Fault['kind'], number>;
  outcomes: Record<Outcome['kind'], number>;
  /** How many ops of each kind the programs held (an isolation level counted as its own). */
  ops: Record<string, number>;
  violations: Violation[];
  seconds: number;
}

interface Answer {
  status: number;
  body: string;
}

/**
 * Answers after which the client retries: no answer, the outer timeout's 408, and the library's
 * own 409 and 503 (nothing final happened, or it is not known yet). The handler's own 409 is
 * final: it is stored.
 */
function retried(answer: Answer): boolean {
  if (answer.status === 0 || answer.status === 408) return true;
  return [409, 503].includes(answer.status) && answer.body.includes('urn:idempotency:');
}
/** How long one program may take to reach its final answer. */
const PROGRAM_BUDGET_MS = 40_000;

export function faultArbitrary(sigkills: boolean): fc.Arbitrary<Fault> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant<Fault>({ kind: 'none' }) },
    {
      weight: 2,
      arbitrary: fc
        .integer({ min: 1, max: 80 })
        .map<Fault>((ms) => ({ kind: 'outer-timeout', ms })),
    },
    {
      weight: 2,
      arbitrary: fc
        .integer({ min: 0, max: 60 })
        .map<Fault>((afterMs) => ({ kind: 'drop-connections', afterMs })),
    },
    {
      weight: 1,
      arbitrary: fc
        .integer({ min: 1, max: 20 })
        .map<Fault>((ms) => ({ kind: 'statement-timeout', ms })),
    },
    { weight: 2, arbitrary: fc.constant<Fault>({ kind: 'race' }) },
    {
      weight: sigkills ? 1 : 0,
      arbitrary: fc
        .integer({ min: 0, max: 60 })
        .map<Fault>((afterMs) => ({ kind: 'sigkill', afterMs })),
    },
  );
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Runs `runs` generated programs, each with its faults on its first attempts and retries until
 * a final answer, and checks each against the model: its effects applied exactly once and
 * atomically (or not at all when the final answer is one the library does not store), and
 * every answer after the first final one identical to it.
 */
export async function fuzz(options: FuzzOptions): Promise<FuzzReport> {
  const began = Date.now();
  const admin = new Client({ connectionString: options.databaseUrl });
  await admin.connect();
  await admin.query(FUZZ_DDL);
  const cases = fc.sample(
    fc.tuple(programArbitrary(), fc.array(faultArbitrary(options.sigkills), { maxLength: 3 })),
    { seed: options.seed, numRuns: options.runs },
  );
  const report: FuzzReport = {
    seed: options.seed,
    programs: 0,
    attempts: 0,
    faults: {
      none: 0,
      'outer-timeout': 0,
      'drop-connections': 0,
      'statement-timeout': 0,
      race: 0,
      sigkill: 0,
    },
    outcomes: { ok: 0, error: 0, aborted: 0 },
    ops: {},
    violations: [],
    seconds: 0,
  };
  let adapter: 'express' | 'fastify' = 'express';
  const start = () =>
    startWorker('test/fuzz/fuzz-worker.js', {
      DATABASE_URL: options.databaseUrl,
      ADAPTER: adapter,
    });
  let worker: WorkerProcess = await start();
  try {
    for (const [index, [ops, plan]] of cases.entries()) {
      const program: HandlerProgram = { id: `s${options.seed}-p${index}`, ops };
      const model = expectedOutcome(program);
      report.programs += 1;
      report.outcomes[model.kind] += 1;
      countOps(ops, report.ops);
      const violation = (what: string) => {
        const found = { index, program: describeProgram(ops), faults: describePlan(plan), what };
        report.violations.push(found);
        options.log?.(`VIOLATION #${index} [${found.program}] faults [${found.faults}]: ${what}`);
      };

      const answers: Answer[] = [];
      let final: Answer | undefined;
      const deadline = Date.now() + PROGRAM_BUDGET_MS;
      for (let attempt = 0; !final && Date.now() < deadline; attempt++) {
        const fault = plan[attempt] ?? { kind: 'none' };
        report.faults[fault.kind] += 1;
        report.attempts += 1;
        const got = await attemptWith(fault, program, worker, admin);
        if (fault.kind === 'sigkill') {
          await worker.kill();
          adapter = adapter === 'express' ? 'fastify' : 'express';
          worker = await start();
        }
        for (const answer of got) {
          if (retried(answer)) continue;
          answers.push(answer);
          final ??= answer;
        }
        if (!final) await sleep(100);
      }
      if (!final) {
        violation(`no final answer in ${PROGRAM_BUDGET_MS / 1000} s`);
        continue;
      }
      // Work left running lands a moment after the answer; then one more retry.
      await sleep(150);
      const [again] = await attemptWith({ kind: 'none' }, program, worker, admin);
      answers.push(again);
      const unfaithful = (answer: Answer) =>
        answer.status !== final.status || answer.body !== final.body;
      if (answers.some(unfaithful)) {
        violation(
          `answers differ: first ${show(final)}, then ${answers.filter(unfaithful).map(show).join(', ')}`,
        );
      }
      const mismatch = checkAnswer(model, program, final);
      if (mismatch) violation(mismatch);
      const effects = await admin.query<{ path: string; n: number }>(
        'SELECT path, count(*)::int AS n FROM fuzz_effects WHERE program = $1 GROUP BY path ORDER BY path',
        [program.id],
      );
      const applied = effects.rows.map((row) => (row.n === 1 ? row.path : `${row.path}×${row.n}`));
      const wanted = model.kind === 'ok' ? [...model.writes].sort() : [];
      if (applied.join(',') !== wanted.join(',')) {
        violation(`effects [${applied.join(',')}], the model wants [${wanted.join(',')}]`);
      }
      const later = await admin.query<{ path: string; n: number }>(
        'SELECT path, count(*)::int AS n FROM fuzz_later WHERE program = $1 GROUP BY path ORDER BY path',
        [program.id],
      );
      const landed = later.rows.map((row) => (row.n === 1 ? row.path : `${row.path}×${row.n}`));
      // A crash, or a connection dropped, may take a write the handler left running with it.
      const mayLose = plan.some(
        (fault) => fault.kind === 'sigkill' || fault.kind === 'drop-connections',
      );
      const forgets = model.kind === 'ok' ? [...model.forgets].sort() : [];
      const mayLand = model.kind === 'ok' ? [...forgets, ...model.mayForget] : [];
      const lost = forgets.filter((path) => !landed.includes(path));
      if (
        landed.some((path) => path.includes('×') || !mayLand.includes(path)) ||
        (!mayLose && lost.length)
      ) {
        violation(
          `work left running landed [${landed.join(',')}], the model wants [${forgets.join(',')}]`,
        );
      }
    }
  } finally {
    await worker.kill();
    await admin.end();
  }
  report.seconds = Math.round((Date.now() - began) / 100) / 10;
  return report;
}

/** The final answer against the model. */
function checkAnswer(model: Outcome, program: HandlerProgram, final: Answer): string | undefined {
  switch (model.kind) {
    case 'ok': {
      const body = model.stream
        ? `stream:${program.id}`
        : JSON.stringify({ id: program.id, ops: program.ops.length });
      return final.status === 201 && final.body === body
        ? undefined
        : `final answer ${show(final)}, the model wants 201 ${body}`;
    }
    case 'error':
      return final.status === model.status
        ? undefined
        : `final answer ${show(final)}, the model wants the handler's ${model.status}`;
    case 'aborted':
      return final.status === 500 && final.body.includes('transaction_aborted')
        ? undefined
        : `final answer ${show(final)}, the model wants 500 transaction_aborted`;
  }
}

async function attemptWith(
  fault: Fault,
  program: HandlerProgram,
  worker: WorkerProcess,
  admin: Client,
): Promise<Answer[]> {
  const headers: Record<string, string> = {
    'content-type': 'application/json',
    'idempotency-key': program.id,
  };
  if (fault.kind === 'outer-timeout') headers[OUTER_TIMEOUT_HEADER] = String(fault.ms);
  if (fault.kind === 'statement-timeout') headers[STATEMENT_TIMEOUT_HEADER] = String(fault.ms);
  const send = () => post(`${worker.url}/programs`, headers, JSON.stringify(program));
  let injected: Promise<unknown> = Promise.resolve();
  if (fault.kind === 'drop-connections') {
    injected = sleep(fault.afterMs).then(() =>
      admin.query(
        `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
          WHERE application_name = $1 AND datname = current_database()`,
        [FUZZ_APPLICATION_NAME],
      ),
    );
  }
  if (fault.kind === 'sigkill') injected = sleep(fault.afterMs).then(() => worker.kill());
  const answers = await Promise.all(fault.kind === 'race' ? [send(), send()] : [send()]);
  await injected;
  return answers;
}

async function post(url: string, headers: Record<string, string>, body: string): Promise<Answer> {
  try {
    const response = await fetch(url, {
      method: 'POST',
      headers,
      body,
      signal: AbortSignal.timeout(20_000),
    });
    return { status: response.status, body: await response.text() };
  } catch {
    // The process was killed under the request, or the connection dropped: no answer.
    return { status: 0, body: '' };
  }
}

function countOps(ops: Op[], counts: Record<string, number>): void {
  for (const op of ops) {
    const kind = op.op === 'tx' && op.isolation ? `tx ${op.isolation}` : op.op;
    counts[kind] = (counts[kind] ?? 0) + 1;
    if (op.op === 'tx') countOps(op.body, counts);
  }
}

function show(answer: Answer): string {
  return `${answer.status} ${answer.body.slice(0, 120)}`;
}

function describePlan(plan: Fault[]): string {
  return plan
    .map((fault) => {
      switch (fault.kind) {
        case 'outer-timeout':
        case 'statement-timeout':
          return `${fault.kind}:${fault.ms}`;
        case 'drop-connections':
        case 'sigkill':
          return `${fault.kind}@${fault.afterMs}`;
        default:
          return fault.kind;
      }
    })
    .join(' ');
}

export type { Op };
