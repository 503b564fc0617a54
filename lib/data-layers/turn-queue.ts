import { OwnedAsyncStorage } from './owned-async-storage.js';

/** One turn of a `TurnQueue`: its work, and what was asked from inside it while it ran. */
class Turn {
  /** The pieces of work of this turn still running (its own, and those asked from inside). */
  private running = 0;
  /** How many of its wire steps (the library's own statements) are under way (see `onWire`). */
  wire = 0;
  /** Whether its work began (a turn that gave up waiting never does). */
  begun = false;
  private end!: () => void;
  /** Settled once nothing of the turn runs any more: the next turn may begin. */
  readonly over = new Promise<void>((resolve) => (this.end = resolve));

  /** Whether the turn is running now: what is asked from inside it then runs at once. */
  get underWay(): boolean {
    return this.running > 0;
  }

  run<T>(work: () => Promise<T>): Promise<T> {
    this.begun = true;
    this.running++;
    let result: Promise<T>;
    try {
      result = work();
    } catch (error) {
      result = Promise.reject(error);
    }
    const settled = () => {
      if (--this.running === 0) this.end();
    };
    result.then(settled, settled);
    return result;
  }
}

/**
 * Work run one piece at a time, in the order asked (a data layer's nested starts, commits and
 * rollbacks: see `LazyTransaction.inTurn`). What is asked from inside a turn while it runs (a
 * subscriber's own transaction, started from the commit it is told of) runs at once, as part
 * of that turn: waiting, it would wait for itself. The turn then lasts until that work is done
 * too, awaited or not (a subscriber that does not await its transaction's start): the next
 * turn never runs beside it. Once nothing of a turn runs, the turn is over: what its
 * asynchronous descendants ask later (that transaction's commit) queues as anything else.
 *
 * No wait is unbounded: a turn runs app code (TypeORM's transaction subscribers), which may
 * await the very work queued behind it. Once a piece of work has waited `waitMs` and the turn
 * it waits for is not on the wire (sending the library's own statement, see `onWire`) but in
 * that app code, it gives up with `timedOut()`'s error and never runs; the turns after it wait
 * for what it waited for.
 */
export class TurnQueue {
  private last: Promise<unknown> = Promise.resolve();
  /** Made per transaction: one storage of the process's shared by all (see its note). */
  private readonly current = new OwnedAsyncStorage<Turn>();
  /** The turn that began last: the one a new piece of work waits for, or one over. */
  private holding?: Turn;

  constructor(
    private readonly waitMs = Number.POSITIVE_INFINITY,
    private readonly timedOut: () => Error = () => new Error('turn waited too long'),
  ) {}

  /** Whether the caller runs inside the turn under way (what it asks then runs at once). */
  get within(): boolean {
    return this.current.getStore()?.underWay === true;
  }

  run<T>(work: () => Promise<T>): Promise<T> {
    const inside = this.current.getStore();
    if (inside?.underWay) return inside.run(work);
    const turn = new Turn();
    const before = this.last;
    const result = this.waitFor(before).then(() => {
      this.holding = turn;
      return this.current.run(turn, () => turn.run(work));
    });
    this.last = result.then(
      () => turn.over,
      () => (turn.begun ? turn.over : before),
    );
    return result;
  }

  /** Runs `step`, one of the library's own statements, marked as the turn's wire step. */
  async onWire<T>(step: () => Promise<T>): Promise<T> {
    const turn = this.current.getStore();
    if (!turn?.underWay) return step();
    turn.wire++;
    try {
      return await step();
    } finally {
      turn.wire--;
    }
  }

  /** `before` settled, or the wait given up (see the class's note). */
  private waitFor(before: Promise<unknown>): Promise<void> {
    if (!Number.isFinite(this.waitMs)) return before.then(() => undefined);
    return new Promise<void>((resolve, reject) => {
      let timer: ReturnType<typeof setTimeout>;
      const check = () => {
        const holder = this.holding;
        if (holder?.underWay && holder.wire === 0) reject(this.timedOut());
        else arm();
      };
      const arm = () => {
        timer = setTimeout(check, this.waitMs);
        // A request's own bound: the process need not stay up for it.
        timer.unref?.();
      };
      arm();
      void before.then(() => {
        clearTimeout(timer);
        resolve();
      });
    });
  }
}
