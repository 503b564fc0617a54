import fc from 'fast-check';
import pg, { type Pool } from 'pg';
import { startWorker, type WorkerProcess } from '../support/worker-process.js';
import { fuzzConsumer } from './consumer-runner.js';
import { fuzzJobs } from './job-runner.js';
import { type LayerName } from './data-layers.js';
import {
  ANSWER_EPOCH,
  CHAIN_HEADER,
  FUZZ_APPLICATION_NAME,
  FUZZ_DDL,
  isGraphql,
  OUTER_TIMEOUT_HEADER,
  STATEMENT_TIMEOUT_HEADER,
  type TransportName,
} from './fuzz-app.js';
import { type Via } from './fuzz-consumer.js';
import {
  APP_CHAINS,
  type AppChain,
  describeProgram,
  expectedOutcome,
  type HandlerProgram,
  type Op,
  type Outcome,
  programCaseArbitrary,
  TENANTS,
  withoutIsolation,
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
  | { kind: 'sigkill'; afterMs: number }
  /**
   * Copies of the program sent at once with the attempt, each a program of its own (its own id)
   * under the same key for another tenant (odd ones included): the claim batcher starts them
   * in one tick; they contend for the pool, the advisory lock and the booking.
   */
  | { kind: 'crowd' };

/** How many copies a crowd sends beside the program. */
const CROWD = 5;

export interface FuzzOptions {
  /** The test database (created by the caller, the idempotency tables made by the app). */
  databaseUrl: string;
  seed: number;
  runs: number;
  /** Whether plans may kill the app's process (each costs a restart of a second or two). */
  sigkills: boolean;
  /** The data layer the app's handlers write through; TypeORM when not given. */
  layer?: LayerName;
  /**
   * How programs reach the app: routes (HTTP), mutations on Apollo (GraphQL), messages to a
   * RabbitMQ consumer (`consumer-runner.ts`), or BullMQ jobs (`job-runner.ts`).
   */
  transport?: TransportName;
  /** BullMQ only: its Redis (else REDIS_URL, else 127.0.0.1:6379). */
  redisUrl?: string;
  /** BullMQ only: the processor without `@IdempotentJob()`, the control (its duplicates found). */
  plainJobs?: boolean;
  /** RabbitMQ only: every program through `@IdempotentMessage` or `processOnce()` (else one in three the latter). */
  via?: Via;
  /** Set the database's `default_transaction_isolation` to serializable. */
  defaultSerializable?: boolean;
  /**
   * HTTP only: every other program (by its index) runs on a route with `oneCommit: true`, its
   * claim committed with its work (the others on the default route, beside them).
   */
  oneCommit?: boolean;
  /** Only the program of this index (a violation's reproduction). */
  only?: number;
  /** One program written by hand instead of generated ones, with its faults (a minimal reproduction). */
  program?: { program: Omit<HandlerProgram, 'id'>; faults: Fault[] };
  /** How long one program may take to reach its final answer (40 s when not given). */
  budgetMs?: number;
  log?: (line: string) => void;
}

export interface Violation {
  index: number;
  program: string;
  faults: string;
  what: string;
  /** The command that runs this program again, alone. */
  reproduce: string;
}

export interface FuzzReport {
  seed: number;
  layer: LayerName;
  transport: TransportName;
  /** Programs generated; the crowd's copies are counted apart. */
  programs: number;
  crowdPrograms: number;
  attempts: number;
  /** Attempts per fault kind. */
  faults: Partial<Record<Fault['kind'], number>>;
  /** Programs per app chain (`AppChain`) they ran under; the rest under none. */
  chains: Partial<Record<AppChain, number>>;
  outcomes: Record<Outcome['kind'], number>;
  /** How many ops of each kind the programs held (an isolation level counted as its own). */
  ops: Record<string, number>;
  violations: Violation[];
  seconds: number;
}

/**
 * An answer as the checks see it: on GraphQL, the program's field alone (its data, or its
 * errors as `status`, the library's problem `code`), the operation's other field left out.
 */
interface Answer {
  status: number;
  body: string;
  code?: string;
}

/** The library's GraphQL codes after which a client retries (its 409s and 503s). */
const RETRIED_CODES = [
  'key_in_progress',
  'lease_lost',
  'store_unavailable',
  'database_transient',
  'retry_later',
];

/** The library's refusals of what it cannot keep apart: 500, nothing stored, the retry runs. */
function isUnstoredRefusal(answer: Answer): boolean {
  return (
    answer.status === 500 &&
    ['transaction_aborted', 'cursor_open'].some(
      (code) => answer.code === code || answer.body.includes(`urn:idempotency:${code}`),
    )
  );
}

/**
 * Answers after which the client retries: no answer, the outer timeout's 408, and the library's
 * own 409 and 503 (nothing final happened, or it is not known yet). The handler's own 409 is
 * final: it is stored.
 */
function retried(answer: Answer): boolean {
  if (answer.status === 0 || answer.status === 408) return true;
  if (answer.code !== undefined) return RETRIED_CODES.includes(answer.code);
  return [409, 503].includes(answer.status) && answer.body.includes('urn:idempotency:');
}

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
    { weight: 2, arbitrary: fc.constant<Fault>({ kind: 'crowd' }) },
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
  if (options.transport === 'rabbitmq') return fuzzConsumer(options);
  if (options.transport === 'bullmq') return fuzzJobs(options);
  const began = Date.now();
  const layer = options.layer ?? 'typeorm';
  const transport = options.transport ?? 'http';
  const budgetMs = options.budgetMs ?? 40_000;
  // A pool, not a client: a connection the server terminates (a test of another suite on the
  // same server may) is replaced, and never crashes the run.
  const admin = new pg.Pool({ connectionString: options.databaseUrl, max: 2 });
  admin.on('error', () => undefined);
  await admin.query(FUZZ_DDL);
  if (options.defaultSerializable) {
    const name = decodeURIComponent(new URL(options.databaseUrl).pathname.slice(1));
    await admin.query(
      `ALTER DATABASE "${name}" SET default_transaction_isolation = 'serializable'`,
    );
  }
  const cases: [Omit<HandlerProgram, 'id'>, Fault[]][] = options.program
    ? [[options.program.program, options.program.faults]]
    : fc.sample(
        fc.tuple(
          programCaseArbitrary({ phases: true }),
          fc.array(faultArbitrary(options.sigkills), { maxLength: 3 }),
        ),
        { seed: options.seed, numRuns: options.runs },
      );
  // The app chain by the program's place, not drawn: every chain in every five programs (a
  // draw favours the first of its choices in short runs), and a seed's programs and faults
  // stay what they were before chains came.
  const chainOf = (index: number): AppChain | undefined =>
    options.program
      ? options.program.program.chain
      : APP_CHAINS[(index + options.seed) % APP_CHAINS.length];
  const report: FuzzReport = {
    seed: options.seed,
    layer,
    transport,
    programs: 0,
    crowdPrograms: 0,
    attempts: 0,
    faults: {
      none: 0,
      'outer-timeout': 0,
      'drop-connections': 0,
      'statement-timeout': 0,
      race: 0,
      sigkill: 0,
      crowd: 0,
    },
    chains: {},
    outcomes: { ok: 0, error: 0, aborted: 0, refused: 0 },
    ops: {},
    violations: [],
    seconds: 0,
  };
  let adapter: 'express' | 'fastify' = 'express';
  const start = () =>
    startWorker(
      'test/fuzz/fuzz-worker.js',
      {
        DATABASE_URL: options.databaseUrl,
        ADAPTER: adapter,
        LAYER: layer,
        TRANSPORT: transport,
        DEFAULT_SERIALIZABLE: options.defaultSerializable ? '1' : '0',
      },
      // A start (a GraphQL schema, Prisma's engine) takes long on a loaded machine.
      90_000,
    );
  let worker: WorkerProcess = await start();
  const reproduce = (index: number) =>
    `FUZZ_LAYER=${layer} FUZZ_TRANSPORT=${transport} FUZZ_SEED=${options.seed} FUZZ_RUNS=${options.runs} FUZZ_ONLY=${index}` +
    `${options.sigkills ? '' : ' FUZZ_SIGKILL=0'}${options.defaultSerializable ? ' FUZZ_DEFAULT_SERIALIZABLE=1' : ''}` +
    `${options.oneCommit ? ' FUZZ_ONE_COMMIT=1' : ''} npm run fuzz`;
  const shaped = (program: HandlerProgram): HandlerProgram => {
    let ops = program.ops;
    if (options.defaultSerializable) ops = withoutIsolation(ops);
    if (isGraphql(transport)) ops = ops.filter((op) => op.op !== 'stream');
    return isGraphql(transport)
      ? { ...program, ops }
      : { ...program, ops, shape: undefined, alias: undefined, partial: undefined };
  };
  try {
    for (const [index, [generated, plan]] of cases.entries()) {
      if (options.only !== undefined && index !== options.only) continue;
      const program = shaped({
        id: `s${options.seed}-p${index}`,
        ...generated,
        chain: chainOf(index),
      });
      if (program.chain) report.chains[program.chain] = (report.chains[program.chain] ?? 0) + 1;
      if (options.oneCommit && transport === 'http' && index % 2 === 0) program.oneCommit = true;
      const crowd: HandlerProgram[] = plan.some((fault) => fault.kind === 'crowd')
        ? Array.from({ length: CROWD }, (_, i) => ({
            ...program,
            id: `${program.id}~${i}`,
            key: program.id,
            tenant: TENANTS[(TENANTS.indexOf(program.tenant ?? '1') + i + 1) % TENANTS.length],
          }))
        : [];
      const violation = (subject: HandlerProgram, what: string) => {
        const found = {
          index,
          program: `${subject.id} ${describeProgram(subject.ops)}${describeShape(subject)}`,
          faults: describePlan(plan),
          what,
          reproduce: reproduce(index),
        };
        report.violations.push(found);
        options.log?.(`VIOLATION #${index} [${found.program}] faults [${found.faults}]: ${what}`);
      };
      const context: Settle = {
        transport,
        lazySavepoints: layer !== 'typeorm',
        admin,
        report,
        budgetMs,
        violation,
      };
      const crowdAnswers = new Map<string, Answer>();
      const mayLose = plan.some(
        (fault) => fault.kind === 'sigkill' || fault.kind === 'drop-connections',
      );
      await settle(context, program, plan, mayLose, {
        attempt: async (fault) => {
          const got = await attemptWith(
            fault,
            program,
            worker,
            admin,
            transport,
            crowd,
            crowdAnswers,
          );
          if (fault.kind === 'sigkill') {
            await worker.kill();
            adapter = adapter === 'express' ? 'fastify' : 'express';
            worker = await start();
          }
          return got;
        },
        again: () => attemptWith({ kind: 'none' }, program, worker, admin, transport),
      });
      for (const member of crowd) {
        await settle(context, member, [], mayLose, {
          attempt: async (fault) => {
            // Its first attempt was sent with the crowd: that answer first.
            const first = crowdAnswers.get(member.id);
            if (!first) return attemptWith(fault, member, worker, admin, transport);
            crowdAnswers.delete(member.id);
            return [first];
          },
          again: () => attemptWith({ kind: 'none' }, member, worker, admin, transport),
        });
      }
      // The mutex held: one booking of the key, whoever of the crowd made it.
      const bookings = await admin.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM fuzz_bookings WHERE slot = $1',
        [program.id],
      );
      if (bookings.rows[0].n > 1) {
        violation(program, `${bookings.rows[0].n} bookings of one slot under the advisory lock`);
      }
    }
  } finally {
    await worker.kill();
    await admin.end();
  }
  report.seconds = Math.round((Date.now() - began) / 100) / 10;
  return report;
}

interface Settle {
  transport: TransportName;
  /** The pool seam's nested transactions make their savepoint with their first statement. */
  lazySavepoints: boolean;
  admin: Pool;
  report: FuzzReport;
  budgetMs: number;
  violation: (program: HandlerProgram, what: string) => void;
}

/** Retries one program to its final answer (its first attempts with `plan`'s faults), then checks it. */
async function settle(
  context: Settle,
  program: HandlerProgram,
  plan: Fault[],
  mayLose: boolean,
  send: { attempt: (fault: Fault) => Promise<Answer[]>; again: () => Promise<Answer[]> },
): Promise<void> {
  const { report, admin, budgetMs } = context;
  const violation = (what: string) => context.violation(program, what);
  const model = expectedOutcome(program, { lazySavepoints: context.lazySavepoints });
  if (program.id.includes('~')) report.crowdPrograms += 1;
  else report.programs += 1;
  report.outcomes[model.kind] += 1;
  countOps(program.ops, report.ops);

  const answers: Answer[] = [];
  let final: Answer | undefined;
  let deadline = Date.now() + budgetMs;
  let last: Answer | undefined;
  for (let attempt = 0; !final && Date.now() < deadline; attempt++) {
    const fault = plan[attempt] ?? { kind: 'none' };
    report.faults[fault.kind] = (report.faults[fault.kind] ?? 0) + 1;
    report.attempts += 1;
    const began = Date.now();
    const got = await send.attempt(fault);
    // The app's restart after a SIGKILL is the fault's, not the program's time.
    if (fault.kind === 'sigkill') deadline += Date.now() - began;
    last = got.at(-1);
    for (const answer of got) {
      if (retried(answer)) continue;
      answers.push(answer);
      final ??= answer;
    }
    if (!final) await sleep(100);
  }
  if (!final) {
    violation(`no final answer in ${budgetMs / 1000} s (the last: ${last ? show(last) : 'none'})`);
    return;
  }
  // Work left running lands a moment after the answer; then one more retry.
  await sleep(150);
  const [again] = await send.again();
  answers.push(again);
  // A refusal is not stored (nothing of the request stays): the retry runs the program again,
  // and the race that made it (work left running beside a nested transaction's rollback) may
  // go the other way. Every answer after the first stored one must be the same.
  const mayRefuse = 'refusable' in model && model.refusable === true;
  const from = mayRefuse
    ? Math.max(
        0,
        answers.findIndex((a) => !isUnstoredRefusal(a)),
      )
    : 0;
  const first = answers[from] ?? final;
  const unfaithful = (answer: Answer) =>
    answer.status !== first.status || answer.body !== first.body;
  if (answers.slice(from).some(unfaithful)) {
    violation(
      `answers differ: first ${show(first)}, then ${answers.slice(from).filter(unfaithful).map(show).join(', ')}`,
    );
  }
  const effects = await admin.query<{ path: string; n: number }>(
    'SELECT path, count(*)::int AS n FROM fuzz_effects WHERE program = $1 GROUP BY path ORDER BY path',
    [program.id],
  );
  const applied = effects.rows.map((row) => (row.n === 1 ? row.path : `${row.path}×${row.n}`));
  // What the library may refuse, refused: a final error with nothing applied is right too.
  // What phases committed before the handler failed stays (`durable`), and nothing else.
  const durable = (model.kind === 'refused' ? [] : (model.durable ?? [])).slice().sort();
  const refused =
    (model.kind === 'ok' || model.kind === 'error' || model.kind === 'aborted') &&
    model.refusable === true &&
    first.status >= 400 &&
    applied.every((path) => durable.includes(path));
  if (refused) return;
  const mismatch = checkAnswer(model, program, first, context.transport);
  if (mismatch) violation(mismatch);
  const wanted = model.kind === 'ok' ? [...model.writes].sort() : durable;
  if (applied.join(',') !== wanted.join(',')) {
    violation(`effects [${applied.join(',')}], the model wants [${wanted.join(',')}]`);
  }
  const later = await admin.query<{ path: string; n: number }>(
    'SELECT path, count(*)::int AS n FROM fuzz_later WHERE program = $1 GROUP BY path ORDER BY path',
    [program.id],
  );
  const landed = later.rows.map((row) => (row.n === 1 ? row.path : `${row.path}×${row.n}`));
  // A crash, or a connection dropped, may take a write the handler left running with it.
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

function describeShape(program: HandlerProgram): string {
  const parts = [
    program.tenant && program.tenant !== '1' ? `tenant=${JSON.stringify(program.tenant)}` : '',
    program.serializable ? 'route=SERIALIZABLE' : '',
    program.oneCommit ? 'route=oneCommit' : '',
    program.chain ? `chain=${program.chain}` : '',
    program.shape && program.shape !== 'plain' ? `shape=${program.shape}` : '',
    program.alias ? `alias=${program.alias}` : '',
    program.partial ? 'partial' : '',
  ].filter(Boolean);
  return parts.length ? ` {${parts.join(' ')}}` : '';
}

/** The final answer against the model. */
function checkAnswer(
  model: Outcome,
  program: HandlerProgram,
  final: Answer,
  transport: TransportName,
): string | undefined {
  switch (model.kind) {
    case 'ok': {
      const body = model.stream
        ? `stream:${program.id}`
        : JSON.stringify({
            id: program.id,
            ops: program.ops.length,
            ...(isGraphql(transport) && program.shape === 'date'
              ? { at: new Date(ANSWER_EPOCH + program.ops.length * 1000).toISOString() }
              : {}),
            // The BigInt scalar writes it as a string; stored as written, replayed the same.
            ...(isGraphql(transport) && program.shape === 'bigint'
              ? { big: String(program.ops.length) }
              : {}),
          });
      return final.status === 201 && final.body === body
        ? undefined
        : `final answer ${show(final)}, the model wants 201 ${body}`;
    }
    case 'error':
      // Apollo renders an HttpException with an object body as INTERNAL_SERVER_ERROR, without
      // its status: on GraphQL the check is that the answer is the handler's error, final.
      if (isGraphql(transport)) {
        return final.status >= 400 && final.code !== 'transaction_aborted'
          ? undefined
          : `final answer ${show(final)}, the model wants the handler's error`;
      }
      // A handler's 500 is not the library's 500 transaction_aborted (same status).
      return final.status === model.status &&
        final.code !== 'transaction_aborted' &&
        !final.body.includes('transaction_aborted')
        ? undefined
        : `final answer ${show(final)}, the model wants the handler's ${model.status}`;
    case 'aborted':
      return final.status === 500 &&
        (final.code === 'transaction_aborted' || final.body.includes('transaction_aborted'))
        ? undefined
        : `final answer ${show(final)}, the model wants 500 transaction_aborted`;
    case 'refused':
      if (model.code !== undefined) {
        const status = isGraphql(transport) ? final.status >= 400 : final.status === model.status;
        return status && (final.code === model.code || final.body.includes(model.code))
          ? undefined
          : `final answer ${show(final)}, the model wants ${model.status} ${model.code}`;
      }
      return final.status >= 400
        ? undefined
        : `final answer ${show(final)}, the model wants it refused`;
  }
}

/** The GraphQL field a program is answered under. */
function fieldOf(program: HandlerProgram): string {
  return program.alias || (program.serializable ? 'runSerializable' : 'run');
}

/** The operation that runs `program`: its field (aliased or not), and a failing one beside it. */
function operationOf(program: HandlerProgram): string {
  const name = program.serializable ? 'runSerializable' : 'run';
  const selection =
    program.shape === 'date' ? 'id ops at' : program.shape === 'bigint' ? 'id ops big' : 'id ops';
  const field = `${program.alias ? `${program.alias}: ` : ''}${name}(program: $program) { ${selection} }`;
  return `mutation Run($program: String!) { ${field}${program.partial ? ' broken' : ''} }`;
}

interface GraphqlError {
  message: string;
  path?: (string | number)[];
  extensions?: {
    code?: string;
    status?: number;
    originalError?: { statusCode?: number };
  };
}

/** The program's field of a GraphQL answer, as an answer of its own. */
function fieldAnswer(raw: Answer, program: HandlerProgram): Answer {
  if (raw.status !== 200) return raw;
  const field = fieldOf(program);
  let parsed: { data?: Record<string, unknown> | null; errors?: GraphqlError[] };
  try {
    parsed = JSON.parse(raw.body) as typeof parsed;
  } catch {
    return raw;
  }
  const errors = (parsed.errors ?? []).filter((error) => error.path?.[0] === field);
  if (errors.length) {
    const extensions = errors[0].extensions ?? {};
    // Apollo names the outer timeout's 408 (REQUEST_TIMEOUT); Mercurius writes an app's
    // HttpException with its message alone, so a client there knows it by its words.
    const timedOut =
      extensions.code === 'REQUEST_TIMEOUT' ||
      (errors[0].extensions === undefined && errors[0].message === 'Request Timeout');
    const status =
      extensions.status ?? extensions.originalError?.statusCode ?? (timedOut ? 408 : 500);
    return { status, body: JSON.stringify(errors), code: extensions.code };
  }
  const data = parsed.data?.[field];
  if (data === undefined || data === null) {
    return { status: 500, body: `no data for ${field}: ${raw.body}`, code: 'no_data' };
  }
  return { status: 201, body: JSON.stringify(data) };
}

async function attemptWith(
  fault: Fault,
  program: HandlerProgram,
  worker: WorkerProcess,
  admin: Pool,
  transport: TransportName,
  crowd: HandlerProgram[] = [],
  crowdAnswers?: Map<string, Answer>,
): Promise<Answer[]> {
  const headers: Record<string, string> = { 'content-type': 'application/json' };
  if (fault.kind === 'outer-timeout') headers[OUTER_TIMEOUT_HEADER] = String(fault.ms);
  if (fault.kind === 'statement-timeout') headers[STATEMENT_TIMEOUT_HEADER] = String(fault.ms);
  const send = (subject: HandlerProgram) => {
    const keyed: Record<string, string> = {
      ...headers,
      'idempotency-key': subject.key ?? subject.id,
    };
    if (subject.chain) keyed[CHAIN_HEADER] = subject.chain;
    if (transport === 'http') {
      const path = subject.serializable
        ? 'programs-serializable'
        : subject.oneCommit
          ? 'programs-one-commit'
          : 'programs';
      return post(`${worker.url}/${path}`, keyed, JSON.stringify(subject));
    }
    const operation = {
      query: operationOf(subject),
      variables: { program: JSON.stringify(subject) },
    };
    return post(`${worker.url}/graphql`, keyed, JSON.stringify(operation)).then((raw) =>
      fieldAnswer(raw, subject),
    );
  };
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
  const members = fault.kind === 'crowd' ? crowd : [];
  const [answers, memberAnswers] = await Promise.all([
    Promise.all(fault.kind === 'race' ? [send(program), send(program)] : [send(program)]),
    Promise.all(members.map(send)),
  ]);
  for (const [i, member] of members.entries()) crowdAnswers?.set(member.id, memberAnswers[i]);
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
