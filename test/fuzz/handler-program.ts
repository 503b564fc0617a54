import fc from 'fast-check';
import { isWellFormedText } from '../../lib/decisions/well-formed.js';

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
  | { op: 'stream'; fail: boolean }
  /**
   * A read through the data layer's own read API (Prisma's `findUnique`, which Prisma batches
   * across callers of one tick) of the backend it ran on: once the request's transaction has
   * begun (or at once on a SERIALIZABLE route), it must run on the request's connection.
   */
  | { op: 'read' }
  /**
   * A mutex around a booking, the common recipe: `pg_advisory_lock` (session) or
   * `pg_advisory_xact_lock`, count the bookings of the program's key, insert one if there is
   * none, `pg_advisory_unlock`. Concurrent copies of a program (the crowd fault) must leave one
   * booking. A session lock may be refused by the library (the outcome says `refusable`).
   */
  | { op: 'lock'; scope: 'session' | 'xact' }
  /**
   * In a nested transaction: `SET LOCAL ROLE` to a role that may write the app's tables only
   * (the RLS recipe), `set_config(…, true)`, or `SET LOCAL statement_timeout`. Without the
   * library each ends with the nested transaction; the library's statements must not run
   * under them.
   */
  | { op: 'setlocal'; what: 'role' | 'config' | 'timeout' }
  /** An awaited write in `IdempotentTransaction.outside()`: its own commit, once per attempt. */
  | { op: 'outside' }
  /** A cursor over two rows (Kysely's `stream()`, pg-cursor), a write per row; refusable. */
  | { op: 'cursor' }
  /** An array transaction (Prisma's `$transaction([...])`) of `n` writes, all or none. */
  | { op: 'batch'; n: number }
  /**
   * `phases.run()`, first in the handler (before anything begins the request's transaction):
   * its body commits with its recovery point, apart from the answer, and a retry or takeover
   * skips it once committed. On a `oneCommit` route the first one commits with the claim.
   * `end` 'throw' makes its work throw after its body; `caught` swallows what it threw.
   */
  | { op: 'phase'; body: Op[]; end: 'commit' | 'throw'; caught: boolean };

export type Isolation = 'REPEATABLE READ' | 'SERIALIZABLE';

/**
 * What an app's global interceptor does with the chain under `@Idempotent()`, each an idiom of
 * Nest apps: `retry` resubscribes once after an error (rxjs `retry(1)`); `audit` subscribes a
 * second time at once, on the side, and returns the first (a logger that watches the result);
 * `late-audit` does so once the answer went out (after its own audit entry was written). The request's handler must still run its effects once, and every client
 * answer and replay be the stored one: none changes the program's expected outcome.
 */
export type AppChain = 'retry' | 'audit' | 'late-audit';

/** The app chains the runner takes in turn: none in two programs of five. */
export const APP_CHAINS: readonly (AppChain | undefined)[] = [
  undefined,
  undefined,
  'retry',
  'audit',
  'late-audit',
];

export interface HandlerProgram {
  /** Unique per program: the effect rows are tagged with it (and the key, unless `key`). */
  id: string;
  ops: Op[];
  /** The idempotency key, when not the id: the crowd's copies share one, each of a tenant. */
  key?: string;
  /** The tenant the app's resolver reads from the body; odd ones included. */
  tenant?: string;
  /** Run on a route with `@Idempotent({ isolationLevel: 'SERIALIZABLE' })`. */
  serializable?: boolean;
  /** HTTP only: run on a route with `@Idempotent({ oneCommit: true })` (set by the runner). */
  oneCommit?: boolean;
  /**
   * The app's own global interceptor around the route or field (set by the runner): it runs the
   * handler's chain more than once, as apps do. None when not given.
   */
  chain?: AppChain;
  /** GraphQL only: a `Date` or a `BigInt` field in the answer; under an alias; beside a field that fails. */
  shape?: 'plain' | 'date' | 'bigint';
  alias?: string;
  partial?: boolean;
}

/** What a run of a program must end with, whatever failed on the way. */
export type Outcome =
  /**
   * 201 with `{ id, ops }`, and each listed write applied exactly once. Of the work it left
   * running, each `forgets` write lands once; `mayForget` lists those that may also be lost:
   * a write started while a later nested transaction of the handler's is open lands in its
   * savepoint, and goes with it if that rolls back (as in the same app without the library).
   */
  | {
      kind: 'ok';
      writes: string[];
      forgets: string[];
      mayForget: string[];
      stream: boolean;
      /**
       * The program uses what the library may refuse (a session advisory lock, a cursor, work
       * left running while a nested transaction rolls back): a final error with nothing
       * applied is then right too, never a hang or half its effects.
       */
      refusable: boolean;
      /** The writes of the phases it committed first: what a refusal after them leaves. */
      durable?: string[];
    }
  /**
   * What the library documents as refused (a tenant id with a lone surrogate, refused before
   * anything runs: 400 `tenant_invalid`): a final error, nothing applied; `code`, where the
   * refusal has one the answer must carry. (A `BigInt` in a GraphQL answer is no longer one:
   * the answer is stored as its scalar writes it.)
   */
  | { kind: 'refused'; status?: number; code?: string }
  /**
   * The handler's own error answer, stored and replayed; no effect applied but the `durable`
   * writes of the phases it committed before. `refusable`: it ran what the library may refuse
   * before it threw, so the refusal's final error (nothing more applied) is right too.
   */
  | { kind: 'error'; status: number; refusable?: true; durable?: string[] }
  /**
   * The handler swallowed a failed statement of the request's transaction and answered as
   * if nothing happened: 500 `transaction_aborted`, nothing applied, nothing stored.
   * `refusable`: it ran what the library may refuse before, whose refusal (500 `cursor_open`,
   * nothing applied) is right too.
   */
  | { kind: 'aborted'; refusable?: true; durable?: string[] };

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
  /**
   * A nested transaction rolled back after work was left running: that work's write may have
   * landed in its savepoint (on the request's one connection), and the library's pool seam
   * then refuses the request (`StatementBesideNestedTransactionError`: 500
   * `transaction_aborted`, a consumer's failed delivery) rather than lose the write in silence.
   */
  besideRollback: boolean;
  /**
   * It ran what the library may refuse (a session advisory lock, a cursor) before it threw:
   * the refusal's final error, nothing applied, may then stand for its own error answer.
   */
  ranRefusable?: boolean;
  /**
   * The pool seam makes a nested transaction's savepoint with its first statement: one that
   * ran none (empty, or only waits) begins nothing, as without the library its data layer's
   * BEGIN … ROLLBACK left nothing. TypeORM sends its SAVEPOINT at once.
   */
  lazySavepoints?: boolean;
  /** The writes of the phases that committed (`phase`): they stay if the handler fails after. */
  durable?: string[];
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
 * library must make of it however many attempts, crashes and timeouts it takes. `begun`: the
 * transaction has begun before the handler (at READ COMMITTED), as a consumer's does with the
 * record of its message id: a nested transaction's stronger level is then refused.
 */
export function expectedOutcome(
  program: HandlerProgram,
  { begun = false, lazySavepoints = false }: { begun?: boolean; lazySavepoints?: boolean } = {},
): Outcome {
  // PostgreSQL would store "acme\ud800" and "acme\udbff" as one text: such a tenant is refused.
  if (program.tenant !== undefined && !isWellFormedText(program.tenant)) {
    return { kind: 'refused', status: 400, code: 'tenant_invalid' };
  }
  const top: Level = { aborted: false, writes: [] };
  const forgets: string[] = [];
  const request: RequestState = { begun, strength: 1, besideRollback: false, lazySavepoints };
  const thrown = runOps(program.ops, '', top, forgets, request);
  // What the phases committed stays, whatever the handler does after them.
  const durable = request.durable?.length ? { durable: request.durable } : {};
  if (thrown !== undefined) {
    // A statement error out of the handler is its final answer, Nest's 500, stored.
    return {
      kind: 'error',
      status: typeof thrown === 'object' ? thrown.http : 500,
      ...(request.ranRefusable ? { refusable: true as const } : {}),
      ...durable,
    };
  }
  if (top.aborted) {
    return {
      kind: 'aborted',
      ...(request.ranRefusable ? { refusable: true as const } : {}),
      ...durable,
    };
  }
  const laterTransaction = (path: string) =>
    program.ops.slice(Number(path) + 1).some((op) => op.op === 'tx');
  return {
    kind: 'ok',
    writes: top.writes,
    forgets: forgets.filter((path) => !laterTransaction(path)),
    mayForget: forgets.filter(laterTransaction),
    stream: program.ops.some((op) => op.op === 'stream'),
    refusable: refusable(program.ops) || request.besideRollback,
    ...durable,
  };
}

/** Whether `ops` use what the library may refuse: a session advisory lock, a cursor. */
function refusable(ops: Op[]): boolean {
  return ops.some(
    (op) =>
      (op.op === 'lock' && op.scope === 'session') ||
      op.op === 'cursor' ||
      (op.op === 'tx' && refusable(op.body)),
  );
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
    if (begins(op)) request.begun = true;
    switch (op.op) {
      case 'write':
        if (level.aborted) return 'aborted';
        level.writes.push(path);
        break;
      case 'read':
      case 'lock':
      case 'setlocal':
        // A session lock is refused from its text, before it is sent: an aborted transaction too.
        if (op.op === 'lock' && op.scope === 'session') request.ranRefusable = true;
        if (level.aborted) return 'aborted';
        break;
      case 'cursor':
        if (level.aborted) return 'aborted';
        request.ranRefusable = true;
        level.writes.push(`${path}.0`, `${path}.1`);
        break;
      case 'batch':
        if (level.aborted) return 'aborted';
        level.writes.push(...Array.from({ length: op.n }, (_, i) => `${path}.${i}`));
        break;
      case 'outside':
        break;
      case 'fail':
        if (op.then === 'throw') return level.aborted ? 'aborted' : 'statement';
        level.aborted = true;
        break;
      case 'tx': {
        const thrown = runTransaction(op, `${path}.`, level, forgets, request);
        // Its savepoint rolled back (a refused level never opened one).
        if (thrown !== undefined && thrown !== 'refused' && forgets.length) {
          request.besideRollback = true;
        }
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
      case 'phase': {
        // Its own transaction, at READ COMMITTED, before the request's began.
        const inner: Level = { aborted: false, writes: [] };
        const state: RequestState = { begun: false, strength: 1, besideRollback: false };
        const failed =
          runOps(op.body, `${path}.`, inner, forgets, state) ??
          (op.end === 'throw' ? 'program' : undefined);
        if (failed === undefined) {
          level.writes.push(...inner.writes);
          request.durable = [...(request.durable ?? []), ...inner.writes];
        } else if (!op.caught || !swallowed(failed)) return failed;
        break;
      }
    }
  }
  return undefined;
}

/** Whether `ops` send a statement (their nested transactions' included). */
function runsStatements(ops: Op[]): boolean {
  return ops.some(
    (op) => begins(op) || op.op === 'read' || (op.op === 'tx' && runsStatements(op.body)),
  );
}

/** Whether `op` begins the request's transaction (at READ COMMITTED: a statement not a plain read). */
function begins(op: Op): boolean {
  // A read too: it reads the app's own view (`fuzz_whoami`), which may reach the app's code,
  // so the library opens the transaction for it (f170a59); a stronger level asked after it is
  // refused, as transactions.md says.
  return ['write', 'fail', 'dbsleep', 'lock', 'setlocal', 'cursor', 'batch', 'read'].includes(
    op.op,
  );
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
  const sendsStatements = runsStatements(op.body);
  if (!request.lazySavepoints || op.isolation || sendsStatements) request.begun = true;
  // SAVEPOINT is itself refused in an aborted transaction. TypeORM sends it at once; the pool
  // seam with the body's first statement, so a body that sends none (empty, or only waits)
  // meets nothing refused and commits as nothing, and one that does is refused at that
  // statement (its SAVEPOINT's error), after what ran before it.
  if (level.aborted && !request.lazySavepoints) return 'aborted';
  const inherited = level.aborted;
  const inner: Level = { aborted: inherited, writes: [] };
  const thrown = runOps(op.body, prefix, inner, forgets, request);
  if (thrown !== undefined) return thrown;
  if (op.end === 'throw') return 'program';
  // RELEASE SAVEPOINT fails in an aborted transaction; TypeORM then rolls back to it. On the
  // pool seam a SAVEPOINT that failed fails the COMMIT; one never sent ends nothing.
  if (inner.aborted && (!inherited || sendsStatements)) return 'aborted';
  level.writes.push(...inner.writes);
  return undefined;
}

/**
 * A phase's body: what a phase does with its manager (no nested transactions, no work left
 * running, no swallowed failure: its commit would then fail as the request's does, which the
 * `tx` op covers).
 */
function phaseArbitrary(): fc.Arbitrary<Op> {
  const leaf = fc.oneof(
    { weight: 6, arbitrary: fc.constant<Op>({ op: 'write' }) },
    { weight: 1, arbitrary: fc.constant<Op>({ op: 'fail', then: 'throw' }) },
    {
      weight: 1,
      arbitrary: fc
        .oneof({ weight: 8, arbitrary: fc.integer({ min: 0, max: 40 }) }, fc.constant(700))
        .map<Op>((ms) => ({ op: 'sleep', ms })),
    },
    {
      weight: 1,
      arbitrary: fc.integer({ min: 0, max: 40 }).map<Op>((ms) => ({ op: 'dbsleep', ms })),
    },
    { weight: 1, arbitrary: fc.constant<Op>({ op: 'read' }) },
  );
  return fc.record({
    op: fc.constant('phase' as const),
    body: fc.array(leaf, { minLength: 0, maxLength: 3 }),
    end: fc.constantFrom('commit' as const, 'commit' as const, 'throw' as const),
    caught: fc.constantFrom(true, false),
  });
}

/**
 * Programs as fast-check generates them: small, nested at most twice, `forget` at the top;
 * with `phases`, up to two `phase` ops first (a handler's atomic phases come before its other
 * work).
 */
export function programArbitrary({ phases = false }: { phases?: boolean } = {}): fc.Arbitrary<
  Op[]
> {
  const first = phases
    ? fc.oneof(
        { weight: 3, arbitrary: fc.constant<Op[]>([]) },
        { weight: 2, arbitrary: fc.array(phaseArbitrary(), { minLength: 1, maxLength: 2 }) },
      )
    : fc.constant<Op[]>([]);
  return fc.tuple(first, rest()).map(([leading, ops]) => [...leading, ...ops]);
}

function rest(): fc.Arbitrary<Op[]> {
  const leaf = (withForget: boolean, nested: boolean): fc.Arbitrary<Op> =>
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
        // Now and then past a heartbeat (a third of the fuzz app's 1.5 s lease).
        arbitrary: fc
          .oneof({ weight: 12, arbitrary: fc.integer({ min: 0, max: 40 }) }, fc.constant(700))
          .map<Op>((ms) => ({ op: 'sleep', ms })),
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
      { weight: 2, arbitrary: fc.constant<Op>({ op: 'read' }) },
      {
        weight: 1,
        arbitrary: fc.constantFrom<Op>(
          { op: 'lock', scope: 'session' },
          { op: 'lock', scope: 'xact' },
        ),
      },
      { weight: 1, arbitrary: fc.constant<Op>({ op: 'outside' }) },
      { weight: 1, arbitrary: fc.constant<Op>({ op: 'cursor' }) },
      { weight: 1, arbitrary: fc.integer({ min: 1, max: 3 }).map<Op>((n) => ({ op: 'batch', n })) },
      {
        weight: nested ? 2 : 0,
        arbitrary: fc.constantFrom<Op>(
          { op: 'setlocal', what: 'role' },
          { op: 'setlocal', what: 'config' },
          { op: 'setlocal', what: 'timeout' },
        ),
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
  const innermost = fc.array(leaf(false, true), { minLength: 0, maxLength: 3 });
  const nested = fc.array(
    fc.oneof({ weight: 4, arbitrary: leaf(false, true) }, transaction(innermost)),
    { maxLength: 3 },
  );
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
          { weight: 8, arbitrary: leaf(true, false) },
          { weight: 2, arbitrary: transaction(nested) },
          { weight: 1, arbitrary: isolated },
        ),
        { minLength: 1, maxLength: 7 },
      ),
      ending,
    )
    .map(([ops, last]) => deterministic(last ? [...ops, last] : ops));
}

/** Tenant ids as apps meet them, odd ones included: two differ only in a lone surrogate. */
export const TENANTS = ['1', 'acme', 'Ünïcödé', '🏦 bank', ' spaced ', 'acme\ud800', 'acme\udbff'];

/** A whole program but its id: the ops, and what the route and (on GraphQL) the operation are. */
export function programCaseArbitrary({ phases = false }: { phases?: boolean } = {}): fc.Arbitrary<
  Omit<HandlerProgram, 'id'>
> {
  return fc
    .record({
      ops: programArbitrary({ phases }),
      tenant: fc.constantFrom(...TENANTS),
      serializable: fc.oneof({ weight: 4, arbitrary: fc.constant(false) }, fc.constant(true)),
      shape: fc.constantFrom<'plain' | 'date' | 'bigint'>('plain', 'plain', 'date', 'bigint'),
      alias: fc.constantFrom('', '', 'first', 'again'),
      partial: fc.boolean(),
    })
    .map((program) =>
      program.serializable ? { ...program, ops: withoutIsolation(program.ops) } : program,
    );
}

/**
 * The ops without the isolation levels their nested transactions ask for: on a route (or a
 * database) that begins every transaction SERIALIZABLE, whether a first read began it decides
 * a weaker level's fate, which the model does not follow.
 */
export function withoutIsolation(ops: Op[]): Op[] {
  return ops.map((op) =>
    op.op === 'tx' ? { ...op, isolation: undefined, body: withoutIsolation(op.body) } : op,
  );
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
    if (begins(op)) settled = true;
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
        case 'read':
        case 'outside':
        case 'cursor':
          return op.op;
        case 'lock':
          return `lock:${op.scope}`;
        case 'setlocal':
          return `setlocal:${op.what}`;
        case 'batch':
          return `batch:${op.n}`;
        case 'phase':
          return `phase(${describeProgram(op.body)})${op.end === 'throw' ? '!' : ''}${op.caught ? '?' : ''}`;
      }
    })
    .join(' ');
}
