import { randomBytes } from 'node:crypto';
import amqplib from 'amqplib';
import fc from 'fast-check';
import pg from 'pg';
import { startWorker, type WorkerProcess } from '../support/worker-process.js';
import {
  checkDelivery,
  checkDuplicate,
  checkLeftRunning,
  type DeliveryRecord,
  type Settlement,
} from './delivery-check.js';
import { FUZZ_DDL } from './fuzz-app.js';
import { CONSUMERS, type Delivery, PATTERNS, RABBITMQ_URL, type Via } from './fuzz-consumer.js';
import { type Fault, type FuzzOptions, type FuzzReport } from './fuzz-runner.js';
import {
  describeProgram,
  expectedOutcome,
  type HandlerProgram,
  type Op,
  programCaseArbitrary,
  withoutIsolation,
} from './handler-program.js';

/**
 * The fuzzer on the consumers (transport `rabbitmq`): each generated program is published to
 * a RabbitMQ queue under its id as the message id, run by the app's consumer (a process of its
 * own, `fuzz-consumer.ts`) through `@IdempotentMessage({ ack: true })` or, one program in
 * three, `ProcessedMessages.processOnce()`, and redelivered by the broker until it is settled
 * for good (acknowledged, or rejected once given up). The faults a consumer meets, on its
 * first deliveries: the app's connections terminated this long after the handler began (on
 * the first delivery, then the redelivery, in the plan's order), a statement
 * timeout on the first delivery of a copy, a duplicate published at once (or, later in the
 * plan, while it is being redelivered), SIGKILL of the consumer's process (the broker
 * redelivers what it had not acknowledged to the restarted one), and a crowd of other messages
 * contending for the pool and the advisory lock. Then one more copy, a duplicate of a settled
 * message. Each id is checked by `checkDelivery()`.
 */

/** How many other messages a crowd publishes beside the program (each its own id, one slot). */
const CROWD = 5;

/** The faults a consumer meets: an HTTP client's outer timeout has no place here. */
export function deliveryFaultArbitrary(sigkills: boolean): fc.Arbitrary<Fault> {
  return fc.oneof(
    { weight: 3, arbitrary: fc.constant<Fault>({ kind: 'none' }) },
    {
      // Timed from the handler's start (by the consumer: see `Delivery`), on the deliveries
      // in the plan's order; most handlers run for a few milliseconds.
      weight: 3,
      arbitrary: fc
        .oneof(fc.constant(0), fc.integer({ min: 1, max: 8 }), fc.integer({ min: 0, max: 60 }))
        .map<Fault>((afterMs) => ({ kind: 'drop-connections', afterMs })),
    },
    {
      weight: 1,
      arbitrary: fc
        .integer({ min: 1, max: 20 })
        .map<Fault>((ms) => ({ kind: 'statement-timeout', ms })),
    },
    { weight: 2, arbitrary: fc.constant<Fault>({ kind: 'race' }) },
    { weight: 1, arbitrary: fc.constant<Fault>({ kind: 'crowd' }) },
    {
      weight: sigkills ? 1 : 0,
      arbitrary: fc
        .integer({ min: 0, max: 60 })
        .map<Fault>((afterMs) => ({ kind: 'sigkill', afterMs })),
    },
  );
}

/** The settlements the consumer's processes printed, the killed ones' included. */
class Heard {
  private retired = '';
  private current: WorkerProcess | undefined;

  watch(worker: WorkerProcess): void {
    if (this.current) this.retired += this.current.output();
    this.current = worker;
  }

  of(id: string): Settlement[] {
    const output = this.retired + (this.current?.output() ?? '');
    const found: Settlement[] = [];
    for (const match of output.matchAll(/^settled (\S+) (ack|requeue|reject)$/gm)) {
      if (match[1] === id) found.push(match[2] as Settlement);
    }
    return found;
  }

  /** The consumer's own log lines (its errors, with TEST_LOGS its Nest log), the last `n`. */
  log(n: number): string[] {
    const output = this.retired + (this.current?.output() ?? '');
    return output
      .split('\n')
      .filter((line) => line && !line.startsWith('settled ') && !line.startsWith('listening on'))
      .slice(-n);
  }

  /** Copies of `id` settled for good (acknowledged or rejected). */
  settled(id: string): number {
    return this.of(id).filter((s) => s !== 'requeue').length;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function waitFor(check: () => boolean, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (!check()) {
    if (Date.now() > deadline) return false;
    await sleep(20);
  }
  return true;
}

/** A program as a message carries it: no tenant, route, GraphQL shape or streamed answer. */
export function asMessage(program: HandlerProgram, defaultSerializable: boolean): HandlerProgram {
  let ops: Op[] = program.ops.filter((op) => op.op !== 'stream');
  if (defaultSerializable) ops = withoutIsolation(ops);
  return { id: program.id, ops, key: program.key };
}

export async function fuzzConsumer(options: FuzzOptions): Promise<FuzzReport> {
  const began = Date.now();
  const layer = options.layer ?? 'typeorm';
  const budgetMs = options.budgetMs ?? 40_000;
  const admin = new pg.Pool({ connectionString: options.databaseUrl, max: 2 });
  admin.on('error', () => undefined);
  await admin.query(FUZZ_DDL);
  if (options.defaultSerializable) {
    const name = decodeURIComponent(new URL(options.databaseUrl).pathname.slice(1));
    await admin.query(
      `ALTER DATABASE "${name}" SET default_transaction_isolation = 'serializable'`,
    );
  }
  const queue = `fuzz-${layer}-${options.seed}-${randomBytes(3).toString('hex')}`;
  const amqp = await amqplib.connect(RABBITMQ_URL);
  const channel = await amqp.createChannel();
  await channel.assertQueue(queue, { durable: false });

  const cases: [Omit<HandlerProgram, 'id'>, Fault[]][] = options.program
    ? [[options.program.program, options.program.faults]]
    : fc.sample(
        fc.tuple(
          programCaseArbitrary(),
          fc.array(deliveryFaultArbitrary(options.sigkills), { maxLength: 3 }),
        ),
        { seed: options.seed, numRuns: options.runs },
      );
  const report: FuzzReport = {
    seed: options.seed,
    layer,
    transport: 'rabbitmq',
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
        TRANSPORT: 'rabbitmq',
        QUEUE: queue,
        DEFAULT_SERIALIZABLE: options.defaultSerializable ? '1' : '0',
      },
      90_000,
    );
  const heard = new Heard();
  let worker = await start();
  heard.watch(worker);
  const reproduce = (index: number) =>
    `FUZZ_LAYER=${layer} FUZZ_TRANSPORT=rabbitmq FUZZ_SEED=${options.seed} FUZZ_RUNS=${options.runs} FUZZ_ONLY=${index}` +
    `${options.sigkills ? '' : ' FUZZ_SIGKILL=0'}${options.defaultSerializable ? ' FUZZ_DEFAULT_SERIALIZABLE=1' : ''}` +
    `${options.via ? ` FUZZ_VIA=${options.via}` : ''} npm run fuzz`;

  try {
    for (const [index, [generated, drawn]] of cases.entries()) {
      if (options.only !== undefined && index !== options.only) continue;
      const via: Via = options.via ?? (index % 3 === 2 ? 'once' : 'message');
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
      const published = new Map<string, number>();
      // The drops of the plan, in order: the first delivery's, the redelivery's...
      const drops = plan.flatMap((fault) =>
        fault.kind === 'drop-connections' ? [fault.afterMs] : [],
      );
      const publish = (subject: HandlerProgram, faults: Omit<Delivery, 'program'> = {}) => {
        const delivery: Delivery = { program: subject, ...faults };
        channel.sendToQueue(
          queue,
          Buffer.from(JSON.stringify({ pattern: PATTERNS[via], data: delivery })),
          { messageId: subject.id },
        );
        published.set(subject.id, (published.get(subject.id) ?? 0) + 1);
      };
      const allSettled = () =>
        subjects.every((subject) => heard.settled(subject.id) >= (published.get(subject.id) ?? 0));

      let deadline = Date.now() + budgetMs;
      let crowdSent = false;
      for (let attempt = 0; attempt < Math.max(1, plan.length); attempt++) {
        const fault = plan[attempt] ?? { kind: 'none' };
        report.faults[fault.kind] = (report.faults[fault.kind] ?? 0) + 1;
        report.attempts += 1;
        const before = heard.of(program.id).length;
        if (attempt === 0) {
          publish(program, {
            dropAfterMs: drops,
            statementTimeoutMs: fault.kind === 'statement-timeout' ? fault.ms : undefined,
          });
        } else if (fault.kind === 'statement-timeout') {
          publish(program, { statementTimeoutMs: fault.ms });
        }
        if (fault.kind === 'race') publish(program);
        if (fault.kind === 'crowd' && !crowdSent) {
          crowdSent = true;
          for (const member of crowd) publish(member);
        }
        if (fault.kind === 'sigkill') {
          await sleep(fault.afterMs);
          const restart = Date.now();
          await worker.kill();
          worker = await start();
          heard.watch(worker);
          deadline += Date.now() - restart;
        }
        // The delivery settles one way or the other (or hangs) before the next fault; a
        // message already settled for good has no delivery left to wait for.
        await waitFor(() => heard.of(program.id).length > before || allSettled(), 5000);
      }
      await waitFor(allSettled, Math.max(0, deadline - Date.now()));
      // Work left running lands a moment after the commit; then what each message left, as
      // its first settlements did (a duplicate delivered later must not hide an ack that
      // came with an effect missing), and a duplicate of each.
      await sleep(150);
      // On the pool seam a nested transaction's SAVEPOINT goes with its first statement.
      const model = expectedOutcome(program, { begun: true, lazySavepoints: layer !== 'typeorm' });
      const settled = new Map<string, DeliveryRecord>();
      for (const subject of subjects) {
        const { landed: _landed, ...found } = await inspect(admin, subject.id, CONSUMERS[via]);
        settled.set(subject.id, {
          model,
          published: published.get(subject.id) ?? 0,
          settlements: heard.of(subject.id),
          ...found,
        });
      }
      for (const subject of subjects) publish(subject);
      // As long as the first copies had: a crowd's duplicates arriving together may starve a
      // small pool (each delivery holds a connection and its outside() wants another), and
      // go back after a growing backoff until they spread out.
      await waitFor(allSettled, budgetMs);

      for (const subject of subjects) {
        if (subject.id.includes('~')) report.crowdPrograms += 1;
        else report.programs += 1;
        report.outcomes[model.kind] += 1;
        const found = await inspect(admin, subject.id, CONSUMERS[via]);
        const mayLose = plan.some(
          (fault) => fault.kind === 'sigkill' || fault.kind === 'drop-connections',
        );
        const after: DeliveryRecord = {
          model,
          published: published.get(subject.id) ?? 0,
          settlements: heard.of(subject.id),
          ...found,
        };
        const before = settled.get(subject.id)!;
        const violations = [
          ...new Set([
            ...checkDelivery(before),
            ...checkDelivery(after),
            ...checkDuplicate(before, after),
          ]),
          ...checkLeftRunning(model, found.landed, {
            mayLose,
            acknowledged: before.settlements.includes('ack'),
          }),
        ];
        for (const what of violations) {
          const violation = {
            index,
            program: `${subject.id} ${describeProgram(subject.ops)} {via ${via}}`,
            faults: describePlan(plan),
            what,
            reproduce: reproduce(index),
          };
          report.violations.push(violation);
          options.log?.(
            `VIOLATION #${index} [${violation.program}] faults [${violation.faults}]: ${what}` +
              heard
                .log(8)
                .map((line) => `\n    | ${line.slice(0, 300)}`)
                .join(''),
          );
        }
      }
      const bookings = await admin.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM fuzz_bookings WHERE slot = $1',
        [program.id],
      );
      if (bookings.rows[0].n > 1) {
        report.violations.push({
          index,
          program: `${program.id} ${describeProgram(program.ops)} {via ${via}}`,
          faults: describePlan(plan),
          what: `${bookings.rows[0].n} bookings of one slot under the advisory lock`,
          reproduce: reproduce(index),
        });
      }
    }
  } finally {
    await worker.kill();
    await channel.deleteQueue(queue).catch(() => undefined);
    await amqp.close().catch(() => undefined);
    await admin.end();
  }
  report.seconds = Math.round((Date.now() - began) / 100) / 10;
  return report;
}

/**
 * Kysely's `stream()` closes its pg-cursor in a `finally`, and TypeORM's stream (pg-query-stream)
 * closes it when destroyed; pg-cursor's close() after the connection died waits for ever (see
 * the pg layer's cursor in `data-layers.ts`): a drop under their cursors hangs the delivery,
 * with or without the library. Their drops are left out of such programs, so that a run finds
 * the library's faults.
 */
export function withoutCursorDrops(layer: string, program: HandlerProgram, plan: Fault[]): Fault[] {
  const holdsCursor = (ops: Op[]): boolean =>
    ops.some((op) => op.op === 'cursor' || (op.op === 'tx' && holdsCursor(op.body)));
  if (!['kysely', 'typeorm'].includes(layer) || !holdsCursor(program.ops)) return plan;
  return plan.map((fault) => (fault.kind === 'drop-connections' ? { kind: 'none' } : fault));
}

/** What the database kept of one message id. */
async function inspect(admin: pg.Pool, id: string, consumer: string) {
  const { rows } = await admin.query<{
    applied: string[];
    landed: string[];
    recorded: boolean;
    counted: number;
  }>(
    `SELECT
       ARRAY(SELECT path || CASE WHEN count(*) > 1 THEN '×' || count(*) ELSE '' END
             FROM fuzz_effects WHERE program = $1 GROUP BY path ORDER BY path) AS applied,
       ARRAY(SELECT path || CASE WHEN count(*) > 1 THEN '×' || count(*) ELSE '' END
             FROM fuzz_later WHERE program = $1 GROUP BY path ORDER BY path) AS landed,
       EXISTS (SELECT 1 FROM processed_messages WHERE consumer = $2 AND message_id = $1)
         AS recorded,
       coalesce((SELECT attempts FROM message_failures WHERE consumer = $2 AND message_id = $1), 0)
         AS counted`,
    [id, consumer],
  );
  return rows[0];
}

export function describePlan(plan: Fault[]): string {
  return plan
    .map((fault) => {
      switch (fault.kind) {
        case 'statement-timeout':
        case 'outer-timeout':
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
