import { type ActiveClaim } from '../shapes/active-claim.js';
import { ErrorHandOff } from '../http/end-of-chain.js';

/** What a run of a field came to, as its subscriber was given it. */
export type FieldRunResult = { value: unknown } | { error: unknown } | { claimAgain: true };

/**
 * One run of a field's resolution through the library. An app may run a field's chain more
 * than once, as it may a route's (see `RequestRun`): an interceptor that subscribes to
 * `next.handle()` on the side beside the one it returns runs both at once, and its retry
 * (rxjs `retry()`) runs the chain again once the first run failed. Seen as another request,
 * the later run met the first one's hold of the key (`key_in_progress`), or replayed the
 * first try's error as the key's answer, so that the app's retry never ran.
 */
export class FieldRun extends ErrorHandOff {
  /** What this run's subscriber is given; `claimAgain` when it left before any answer. */
  readonly result: Promise<FieldRunResult>;
  private settle!: (result: FieldRunResult) => void;
  /** Whether `result` has settled. */
  ended = false;
  /** Its subscriber left before any answer (`claimAgain`). */
  left = false;
  /**
   * The run it joined, when it joined one: a run after it that left goes on from there (a
   * timeout's fallback beside an audit meets the audit's run, not the run that left).
   */
  joined?: FieldRun;
  /**
   * Set while the run's resolver failed and its error waits to be stored until the
   * operation's answer goes out (see `stored-at-answer.ts`): hands the run's claim to a later
   * run of the same field (the app's retry), the error then never stored; `undefined` once
   * the error is being stored.
   */
  takeClaim?: () => ActiveClaim | undefined;
  /**
   * Set when its subscriber left while its resolver goes on (an audit that stopped watching,
   * an outer timeout): settles once that resolver's answer is stored (or its work rolled
   * back). A run that joined this one claims then, and replays it, never meets it held.
   */
  detachedSettled?: Promise<void>;
  /**
   * True until the turn of the event loop it started in has ended (see `inheritsClaim`): the
   * runs an interceptor makes as GraphQL subscribes (an audit on the side, then the returned
   * one) all start in that turn; one that starts on a timer or after I/O is an audit made
   * while the resolver works.
   */
  inStartingTurn = true;
  constructor() {
    super();
    this.result = new Promise((resolve) => (this.settle = resolve));
    setImmediate(() => (this.inStartingTurn = false)).unref();
  }

  end(result: FieldRunResult): void {
    if (this.ended) return;
    this.ended = true;
    this.settle(result);
  }
}

/**
 * The run a later run goes on from: `earlier`, or, where `earlier` left after joining another
 * run, the run it joined (and so on).
 */
export function goesOnFrom(earlier: FieldRun | undefined): FieldRun | undefined {
  let run = earlier;
  while (run?.left && run.joined) run = run.joined;
  return run;
}

/** The runs of a field's resolution, by its `info` (GraphQL makes one per resolution). */
const runs = new WeakMap<object, FieldRun[]>();

/**
 * Registers `run` as the latest run of the field resolution whose GraphQL `info` is `info`;
 * the one before it, if any. Without an `info` object, every run stands alone.
 */
export function startFieldRun(info: unknown, run: FieldRun): FieldRun | undefined {
  if (typeof info !== 'object' || info === null) return undefined;
  const all = runs.get(info);
  if (!all) {
    runs.set(info, [run]);
    return undefined;
  }
  all.push(run);
  return all[all.length - 2];
}

/**
 * The run before `later` whose error `later` is the app's retry of (its chain, read as it
 * subscribes, runs into that run's: `retriedBy`), if any: not always the latest, as an audit
 * inside the app's retry subscribes again before the retry's own run does.
 */
export function retriedRun(
  info: unknown,
  later: FieldRun,
  chain: readonly object[],
): FieldRun | undefined {
  if (typeof info !== 'object' || info === null) return undefined;
  const all = runs.get(info) ?? [];
  return [...all].reverse().find((run) => run !== later && run.retriedBy(chain));
}

/** The earlier run as a later one sees it, as it starts (see `laterRunStep`). */
export interface EarlierRun {
  readonly ended: boolean;
  readonly left: boolean;
  readonly takeClaim?: () => ActiveClaim | undefined;
  /** The later run is the app's retry of the earlier one's error (`FieldRun.retriedBy`). */
  readonly errorHeld: boolean;
}

/**
 * Whether a run that joined `earlier` takes over `earlier`'s claim with its error (a pure
 * decision): its own retry then runs the resolver again as the key's owner, the error never
 * stored. Only for a run that joined while `earlier` worked, in the turn `earlier` started
 * in: GraphQL's own run beside an audit that subscribed first (`r$.subscribe(audit); return
 * r$`, inside the app's retry). A run that joined later, on a timer or after I/O, is an
 * audit made while the resolver works: its error went on to GraphQL's run too, and the
 * client was told it; the audit's own retry is told it again, never pays for an answer the
 * client did not get (adversary 53, seen on CI's loaded machine). Nor one that joined after
 * `earlier` answered (an audit made late).
 */
export function inheritsClaim(earlier: { ended: boolean; inStartingTurn: boolean }): boolean {
  return !earlier.ended && earlier.inStartingTurn;
}

/**
 * How a later run of a field goes on from the run before it (a pure decision):
 *  - `join`: the earlier run has not answered yet (both subscribed at once), or it answered
 *    and this run started after (an audit that subscribed late): the later one answers what
 *    the earlier one came to, and the resolver runs once: never again for nobody (a key given
 *    back by a passing failure, claimed by a late audit, would run it and store an answer
 *    the client never got);
 *  - `take-claim`: the earlier run's resolver failed, its error is not stored yet, and the
 *    app's chain took that error (its `retry()`, whose run this is): the later run owns the
 *    key with the earlier run's claim and runs again;
 *  - `claim`: no earlier run; or the earlier one failed and the app's chain took its error
 *    (the app's retry after a passing failure, whose key was given back); or
 *    the earlier one left before any answer (answered from outside): the later run claims
 *    the key as any request would (and replays what was stored).
 */
export function laterRunStep(earlier: EarlierRun | undefined): 'join' | 'take-claim' | 'claim' {
  if (!earlier) return 'claim';
  if (!earlier.ended) return 'join';
  if (earlier.left) return 'claim';
  // The earlier error was taken by the app's chain: this run is its retry (rxjs `retry()`,
  // at once or delayed). Where the answer went on to GraphQL, this run is an audit that
  // subscribed late: it is told the same answer.
  if (!earlier.errorHeld) return 'join';
  return earlier.takeClaim ? 'take-claim' : 'claim';
}
