import { AsyncLocalStorage } from 'node:async_hooks';

/** One turn of a `TurnQueue`: its work, and what was asked from inside it while it ran. */
class Turn {
  /** The pieces of work of this turn still running (its own, and those asked from inside). */
  private running = 0;
  private end!: () => void;
  /** Settled once nothing of the turn runs any more: the next turn may begin. */
  readonly over = new Promise<void>((resolve) => (this.end = resolve));

  /** Whether the turn is running now: what is asked from inside it then runs at once. */
  get underWay(): boolean {
    return this.running > 0;
  }

  run<T>(work: () => Promise<T>): Promise<T> {
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
 */
export class TurnQueue {
  private last: Promise<unknown> = Promise.resolve();
  private readonly current = new AsyncLocalStorage<Turn>();

  run<T>(work: () => Promise<T>): Promise<T> {
    const inside = this.current.getStore();
    if (inside?.underWay) return inside.run(work);
    const turn = new Turn();
    const result = this.last.then(() => this.current.run(turn, () => turn.run(work)));
    const over = () => turn.over;
    this.last = result.then(over, over);
    return result;
  }
}
