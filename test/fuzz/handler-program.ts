import fc from 'fast-check';

/**
 * A small language of handler programs, each the kind of thing a Nest handler does with its
 * database: the fuzzer generates programs, runs each under `@Idempotent()` (interpreted by
 * `fuzz-app.ts`) with faults injected, and checks the outcome against `expectedOutcome()`.
 */
export type Op =
  /** An insert of one effect row, tagged with the op's path in the program. */
  | { op: 'write' }
  /** A statement that fails (a unique violation), its error swallowed or thrown. */
  | { op: 'fail'; then: 'swallow' | 'throw' }
  /**
   * `dataSource.transaction(cb)`: nested in the request's transaction (a savepoint). `end`
   * 'throw' makes the callback throw after its body; `caught` swallows whatever the
   * transaction threw, as a best-effort service call does. `isolation` (at the top only) asks
   * for a level: it begins the request's transaction at it when nothing began it yet, and is
   * refused when it began at a weaker one.
   */
  | { op: 'tx'; body: Op[]; end: 'commit' | 'throw'; caught: boolean; isolation?: Isolation }
  /** A wait in the handler (an HTTP call, say), holding nothing. */
  | { op: 'sleep'; ms: number }
  /** A wait in the database (`pg_sleep`): what a statement timeout cancels. */
  | { op: 'dbsleep'; ms: number }
  /** A write the handler starts and does not await (an event listener, say). */
  | { op: 'forget' }
  /** A thrown `HttpException`: the handler's own final answer. */
  | { op: 'http'; status: 400 | 404 | 409 | 422 | 500 }
  /**
   * The answer as a stream (`StreamableFile`), last at the top; `fail` makes it fail midway on
   * the first attempt of the program in a process.
   */
  | { op: 'stream'; fail: boolean };

export type Isolation = 'REPEATABLE READ' | 'SERIALIZABLE';

export interface HandlerProgram {
  /** Unique per program: the effect rows and the key are tagged with it. */
  id: string;
  ops: Op[];
}

/** What a run of a program must end with, whatever failed on the way. */
export type Outcome =
  /**
   * 201 with `{ id, ops }`, and each listed write applied exactly once. Of the work it left
   * running, each `forgets` write lands once; `mayForget` lists those that may also be lost:
   * a write started while a later nested transaction of the handler's is open lands in its
   * savepoint, and goes with it if that rolls back (as in the same app without the library).
   */
  | { kind: 'ok'; writes: string[]; forgets: string[]; mayForget: string[]; stream: boolean }
  /** The handler's own error answer, stored and replayed; no effect applied. */
  | { kind: 'error'; status: number }
  /**
   * The handler swallowed a failed statement of the request's transaction and answered as
   * if nothing happened: 500 `transaction_aborted`, nothing applied, nothing stored.
   */
  | { kind: 'aborted' };

/**
 * The thrown errors the model tells apart: a failed statement's, "transaction aborted", the
 * program's own error (what a `tx … throw` throws), and an `HttpException`. A `caught`
 * transaction swallows the first three, as an app swallows the failures it expects.
 */
type Thrown = 'statement' | 'aborted' | 'program' | 'refused' | { http: number };

/** What the request's transaction is: begun (by a statement, or a savepoint) and at what level. */
interface RequestState {
  begun: boolean;
  /** READ COMMITTED 1, REPEATABLE READ 2, SERIALIZABLE 3. */
  strength: number;
}

const STRENGTH: Record<Isolation, number> = { 'REPEATABLE READ': 2, SERIALIZABLE: 3 };

/** Errors a `caught` transaction swallows: not a refused isolation level, not an HTTP error. */
const swallowed = (thrown: Thrown) => thrown !== 'refused' && typeof thrown !== 'object';

interface Level {
  /** PostgreSQL refuses every statement until a savepoint enclosing the failure rolls back. */
  aborted: boolean;
  writes: string[];
}

/**
 * The model: what PostgreSQL and Nest do with a program when nothing fails, which is what the
 * library must make of it however many attempts, crashes and timeouts it takes.
 */
export function expectedOutcome(program: HandlerProgram): Outcome {
  const top: Level = { aborted: false, writes: [] };
  const forgets: string[] = [];
  const request: RequestState = { begun: false, strength: 1 };
  const thrown = runOps(program.ops, '', top, forgets, request);
  if (thrown !== undefined) {
    // A statement error out of the handler is its final answer, Nest's 500, stored.
    return { kind: 'error', status: typeof thrown === 'object' ? thrown.http : 500 };
  }
  if (top.aborted) return { kind: 'aborted' };
  const laterTransaction = (path: string) =>
    program.ops.slice(Number(path) + 1).some((op) => op.op === 'tx');
  return {
    kind: 'ok',
    writes: top.writes,
    forgets: forgets.filter((path) => !laterTransaction(path)),
    mayForget: forgets.filter(laterTransaction),
    stream: program.ops.some((op) => op.op === 'stream'),
  };
}

function runOps(
  ops: Op[],
  prefix: string,
  level: Level,
  forgets: string[],
  request: RequestState,
): Thrown | undefined {
  for (const [index, op] of ops.entries()) {
    const path = `${prefix}${index}`;
    // A statement, or a savepoint, begins the request's transaction (at READ COMMITTED).
    const begins = op.op === 'write' || op.op === 'fail' || op.op === 'dbsleep';
    if (begins) request.begun = true;
    switch (op.op) {
      case 'write':
        if (level.aborted) return 'aborted';
        level.writes.push(path);
        break;
      case 'fail':
        if (op.then === 'throw') return level.aborted ? 'aborted' : 'statement';
        level.aborted = true;
        break;
      case 'tx': {
        const thrown = runTransaction(op, `${path}.`, level, forgets, request);
        if (thrown !== undefined && (!op.caught || !swallowed(thrown))) return thrown;
        break;
      }
      case 'dbsleep':
        if (level.aborted) return 'aborted';
        break;
      case 'sleep':
        break;
      case 'forget':
        forgets.push(path);
        break;
      case 'http':
        return { http: op.status };
      case 'stream':
        // Its first failure midway is answered 503 and not stored: the retry streams it whole.
        break;
    }
  }
  return undefined;
}

/** A savepoint: its writes join the level above only if its callback and release succeed. */
function runTransaction(
  op: Extract<Op, { op: 'tx' }>,
  prefix: string,
  level: Level,
  forgets: string[],
  request: RequestState,
): Thrown | undefined {
  if (op.isolation) {
    // Decided before the SAVEPOINT: the level begins the transaction, or cannot be had.
    if (!request.begun) request.strength = STRENGTH[op.isolation];
    else if (STRENGTH[op.isolation] > request.strength) return 'refused';
  }
  request.begun = true;
  // SAVEPOINT is itself refused in an aborted transaction.
  if (level.aborted) return 'aborted';
  const inner: Level = { aborted: false, writes: [] };
  const thrown = runOps(op.body, prefix, inner, forgets, request);
  if (thrown !== undefined) return thrown;
  if (op.end === 'throw') return 'program';
  // RELEASE SAVEPOINT fails in an aborted transaction; TypeORM then rolls back to it.
  if (inner.aborted) return 'aborted';
  level.writes.push(...inner.writes);
  return undefined;
}

/** Programs as fast-check generates them: small, nested at most twice, `forget` at the top. */
export function programArbitrary(): fc.Arbitrary<Op[]> {
  const leaf = (withForget: boolean): fc.Arbitrary<Op> =>
    fc.oneof(
      { weight: 6, arbitrary: fc.constant<Op>({ op: 'write' }) },
      {
        weight: 2,
        arbitrary: fc.constantFrom<Op>(
          { op: 'fail', then: 'swallow' },
          { op: 'fail', then: 'throw' },
        ),
      },
      {
        weight: 1,
        arbitrary: fc.integer({ min: 0, max: 40 }).map<Op>((ms) => ({ op: 'sleep', ms })),
      },
      {
        weight: 1,
        arbitrary: fc.integer({ min: 0, max: 40 }).map<Op>((ms) => ({ op: 'dbsleep', ms })),
      },
      { weight: withForget ? 2 : 0, arbitrary: fc.constant<Op>({ op: 'forget' }) },
      {
        weight: 1,
        arbitrary: fc.constantFrom(400, 404, 409, 422, 500).map<Op>((status) => ({
          op: 'http',
          status: status as 400,
        })),
      },
    );
  const transaction = (body: fc.Arbitrary<Op[]>): fc.Arbitrary<Op> =>
    fc.record({
      op: fc.constant('tx' as const),
      body,
      end: fc.constantFrom('commit' as const, 'commit' as const, 'throw' as const),
      // Mostly caught: a best-effort call, the shape of "Exactly once at every seam", item 1.
      caught: fc.constantFrom(true, true, false),
    });
  const innermost = fc.array(leaf(false), { minLength: 0, maxLength: 3 });
  const nested = fc.array(fc.oneof({ weight: 4, arbitrary: leaf(false) }, transaction(innermost)), {
    maxLength: 3,
  });
  const isolated = fc
    .tuple(transaction(nested), fc.constantFrom<Isolation>('REPEATABLE READ', 'SERIALIZABLE'))
    .map<Op>(([op, isolation]) => ({ ...(op as Extract<Op, { op: 'tx' }>), isolation }));
  const ending = fc.option(
    fc.boolean().map<Op>((fail) => ({ op: 'stream', fail })),
    { freq: 4 },
  );
  return fc
    .tuple(
      fc.array(
        fc.oneof(
          { weight: 8, arbitrary: leaf(true) },
          { weight: 2, arbitrary: transaction(nested) },
          { weight: 1, arbitrary: isolated },
        ),
        { minLength: 1, maxLength: 7 },
      ),
      ending,
    )
    .map(([ops, last]) => deterministic(last ? [...ops, last] : ops));
}

/**
 * Drops an isolation level whose fate depends on timing: work left running (`forget`) before
 * it, with no statement between, begins the transaction or not depending on when it lands.
 */
function deterministic(ops: Op[]): Op[] {
  let settled = false;
  let racing = false;
  return ops.map((op) => {
    if (op.op === 'forget' && !settled) racing = true;
    if (op.op === 'write' || op.op === 'fail' || op.op === 'dbsleep') settled = true;
    if (op.op !== 'tx') return op;
    const kept = racing && !settled ? { ...op, isolation: undefined } : op;
    settled = true;
    return kept;
  });
}

/** The program as one line, for a report. */
export function describeProgram(ops: Op[]): string {
  return ops
    .map((op) => {
      switch (op.op) {
        case 'write':
        case 'forget':
          return op.op;
        case 'fail':
          return `fail:${op.then}`;
        case 'sleep':
        case 'dbsleep':
          return `${op.op}:${op.ms}`;
        case 'http':
          return `http:${op.status}`;
        case 'tx':
          return `tx${op.isolation ? `[${op.isolation === 'SERIALIZABLE' ? 'S' : 'RR'}]` : ''}(${describeProgram(op.body)})${op.end === 'throw' ? '!' : ''}${op.caught ? '?' : ''}`;
        case 'stream':
          return op.fail ? 'stream:fails-once' : 'stream';
      }
    })
    .join(' ');
}
