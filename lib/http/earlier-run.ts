import { type ServerResponse } from 'node:http';
import { ErrorHandOff } from './end-of-chain.js';

/**
 * What a run's handler came to: its last value (and every value, in order, where the run
 * saw them all), or its error as the app's filters get it; or
 * nothing to share (`claimAgain`: it was answered from outside and goes on detached, or never
 * started and gave its key back), and the later run claims the key as any request would.
 */
export type RunOutcome =
  { value: unknown; values?: readonly unknown[] } | { error: unknown } | { claimAgain: true };

/**
 * One run of a request through the library. An app may run a request's handler chain more
 * than once: its own retry outside `@Idempotent()` (rxjs `retry()` in a global interceptor)
 * subscribes again once the first run failed, and an interceptor that subscribes to
 * `next.handle()` twice (an audit "on the side" beside the returned one) runs both at once.
 * Seen as another request, the later run met the first one's hold of the key (409
 * `key_in_progress`), and the first run then stored that 409, written on the response they
 * share, as its answer. Its error handed on, a later run is its retry only where the chain
 * shows it (`ErrorHandOff`).
 */
export class RequestRun extends ErrorHandOff {
  /**
   * Settles once its claim is decided (owned, replayed or refused): a later run waits for it.
   * A run told to claim again claims anew: undecided again until then (`claimAnew`).
   */
  claimed!: Promise<void>;
  private decide!: () => void;
  /**
   * Set by the run that owns the key: once its handler failed, before its answer is on its way,
   * it gives the key back for the later run to claim again, if that run is the app's retry of
   * it (`retryOf`, see `retriedBy`); `undefined` when it cannot.
   */
  stepAside?: (retryOf: RequestRun | undefined) => Promise<void> | undefined;
  /**
   * Set by the run that owns the key: while its handler works, what it comes to, for the later
   * run to answer with (`undefined` when it cannot share it: detached, given back, or a failure
   * the later run retries: `retryOf`).
   */
  outcome?: (retryOf: RequestRun | undefined) => Promise<RunOutcome> | undefined;

  /** The run whose outcome it was told, having joined it (its own handler never ran). */
  joined?: RequestRun;
  /** A later run was made by the operator of the app's that took this run's error. */
  retried = false;
  /** Its subscriber is gone (answered, failed or unsubscribed). */
  gone = false;

  constructor() {
    super();
    this.claimAnew();
  }

  claimAnew(): void {
    this.claimed = new Promise<void>((resolve) => (this.decide = resolve));
  }

  /**
   * Its claim is decided; `after`: not before that settles (a claim still in flight when this
   * run was unsubscribed, given back once it lands), so that the next run does not meet it.
   */
  claimDecided(after?: Promise<unknown>): void {
    const decide = this.decide;
    if (after) void after.then(decide, decide);
    else decide();
  }
}

const runs = new WeakMap<ServerResponse, RequestRun[]>();

/** Registers `run` as the latest of the request answered on `raw`; the one before it, if any. */
export function startRun(raw: ServerResponse, run: RequestRun): RequestRun | undefined {
  const all = runs.get(raw);
  if (!all) {
    runs.set(raw, [run]);
    return undefined;
  }
  all.push(run);
  return all[all.length - 2];
}

/** The latest run of the request answered on `raw`, if any. */
export function latestRun(raw: ServerResponse): RequestRun | undefined {
  return runs.get(raw)?.at(-1);
}

/** Every run of the request answered on `raw`, in the order they started. */
export function runsOf(raw: ServerResponse): readonly RequestRun[] {
  return runs.get(raw) ?? [];
}

/**
 * The failed run whose handler a run starting now (`later`, its chain read as it subscribes)
 * may run again, as the app's retry of it; undefined when it is not a retry, or when it may
 * not run the handler again (a pure decision on the runs, apart from noting what it retried).
 *
 * It is a retry of the run whose chain it runs into (see `resubscribedFrom`): the run that
 * owned the key, or a run that joined it and was told its error. The owner's error may have
 * gone down several chains: its own, and each joined run's. It gives the key back for the
 * retry only once every one of them was retried. A chain that carried the error on (to Nest's
 * exception filter, which writes it, or to an audit's subscriber: the library cannot tell
 * which) may put that error on the response, which must then be the key's answer: the retry is
 * told the same error. So a retry of an audit's chain never gives the key back while the
 * request's own try is answering its error, nor a retry of the request's chain while an audit
 * that ran the handler carried it on.
 */
export function retryTarget(
  all: readonly RequestRun[],
  later: RequestRun,
  chain: readonly object[],
): RequestRun | undefined {
  const retried = [...all].reverse().find((run) => run !== later && run.retriedBy(chain));
  if (!retried) return undefined;
  retried.retried = true;
  const owner = retried.joined ?? retried;
  // A run that joined the owner and still listens will be told the error (a sync retry of
  // another subscription may come first): it carries it too.
  const carriers = all.filter(
    (run) => run === owner || (run.joined === owner && (run.handedOn || !run.gone)),
  );
  return carriers.every((run) => run.handedOn && run.retried) ? owner : undefined;
}

const reclaiming = new WeakMap<ServerResponse, RequestRun>();

/**
 * Registers `run` as the later run of the request on `raw` that claims now; the one that did
 * before it, if any (`run` meets it first, as any later run meets an earlier one).
 */
export function claimingNow(raw: ServerResponse, run: RequestRun): RequestRun | undefined {
  const before = reclaiming.get(raw);
  reclaiming.set(raw, run);
  return before === run ? undefined : before;
}
