import { Logger } from '@nestjs/common';
import { type DataSource, type QueryRunner } from 'typeorm';
import { type SavepointControl } from '../transaction/sql/sql-text.js';

/**
 * When the library has TypeORM's subscribers told of a transaction event of its code's nested
 * transactions (its `dataSource.transaction()`, a query runner's, a `save()`'s own), which
 * are savepoints of the request's: `now`, as TypeORM's runner broadcasts it (a start, a
 * rollback to the savepoint, and `beforeTransactionCommit`, which may still write in the
 * transaction and refuse its commit); `after-request-commit` for `afterTransactionCommit`,
 * which tells the app its work is durable, and it is only at the request's COMMIT: told at
 * the savepoint's RELEASE, a subscriber's outbox relay read nothing yet committed, and one
 * that updated a row the request had locked waited for the COMMIT that waited for it
 * (adversary 80b). Told once the request committed, and only then.
 */
export function whenTold(event: string): 'now' | 'after-request-commit' {
  return event === 'AfterTransactionCommit' ? 'after-request-commit' : 'now';
}

/**
 * A nested commit noted: the runner its code had, its `data` as it was at that commit, and the
 * runner's transaction depth its work now lives in (`into`: 1, the request's own; 2 and more, a
 * savepoint still open, whose rollback undoes it: see `noteAfterEnd`).
 */
interface Noted {
  runner: QueryRunner;
  data: QueryRunner['data'];
  into: number;
  /** How many commits were noted before it (see `SavepointMark.since`). */
  seq: number;
}

/**
 * A savepoint open on the request's connection, by name (its code's own `SAVEPOINT attempt`,
 * or TypeORM's, as named on the wire): `since`, how many nested commits were noted before it
 * was set; `inside`, the runner's depth the work done inside it lives at (its code's own: the
 * depth it was set at; TypeORM's: one deeper, its nested transaction's).
 */
export interface SavepointMark {
  name: string;
  since: number;
  inside: number;
  /** Set by TypeORM for a nested transaction (`typeorm_N`), not by its code's own text. */
  typeorm?: true;
}

/**
 * How a statement text holding savepoint statements (`controls`, one a statement, null for
 * any other: `savepointControlsOf`) ended, for the marks: `ran`, every statement ran;
 * `aborted`, refused at its first statement since the transaction was already aborted
 * (25P02); `failed`, another failure.
 */
export type TextOutcome = 'ran' | 'aborted' | 'failed';

/**
 * The savepoint statements of a text that PostgreSQL ran, to be marked once it answered
 * (adversary 85): a statement that failed, or that never ran, changes no savepoint. All of
 * them when the text ran; none when the transaction was aborted (its first statement is
 * refused). Another failure stops a text at the failing statement, those before it having
 * run: the savepoint statements before its first other statement are taken as run (the
 * failure is that statement's or a later one's: `INSERT …; RELEASE SAVEPOINT s` failing at
 * its INSERT never released `s`), and those after it as not (the failure is known, not
 * where it was). A text of savepoint statements alone that failed failed at one of them,
 * which one unknown: none is taken (one statement, the common case, changed nothing).
 */
export function controlsRan(
  controls: readonly (SavepointControl | null)[],
  outcome: TextOutcome,
): SavepointControl[] {
  const all = controls.filter((control): control is SavepointControl => control !== null);
  if (outcome === 'ran') return all;
  if (outcome === 'aborted') return [];
  const other = controls.indexOf(null);
  if (other < 0) return [];
  return controls.slice(0, other) as SavepointControl[];
}

/**
 * The savepoint marks still open once a nested transaction of TypeORM's ended, the runner now
 * at `depthNow`: those set inside the ended one end with it. Its own savepoint (`typeorm_N`)
 * was ended by its RELEASE, as `savepointMarksAfter` read it, and is kept by its rollback:
 * TypeORM sends `ROLLBACK TO SAVEPOINT typeorm_N` and no RELEASE, and PostgreSQL keeps a
 * savepoint rolled back to. So a TypeORM mark of the ended depth (`depthNow + 1`) still here
 * is one PostgreSQL still holds (the latest rolled back to, or an older one a rollback left,
 * under a later one of the same name since released), which a later by-name `ROLLBACK TO`
 * of its code can reach (adversary 85); what is done after it at `depthNow` is inside it.
 */
export function marksAfterNestedEnd(
  marks: readonly SavepointMark[],
  depthNow: number,
): SavepointMark[] {
  return marks.flatMap((mark) => {
    if (mark.inside <= depthNow) return [mark];
    // Its transaction over, it holds what is done after it at the depth it was set at, as a
    // savepoint of its code's own would.
    if (mark.typeorm && mark.inside === depthNow + 1) return [{ ...mark, inside: depthNow }];
    return [];
  });
}

/**
 * The savepoints open after `control` (a savepoint statement sent on the request's connection),
 * as PostgreSQL reads them: `SAVEPOINT s` sets one more (a name set again hides the older one);
 * `RELEASE s` ends the latest `s` and every one set after it, keeping their work (`undo`
 * none); `ROLLBACK TO s` ends the ones set after the latest `s`, keeps `s`, and undoes every
 * nested commit noted since `s` was set whose work lives inside it (`undo`: that mark, see
 * `undoneBy`). A name none was set under (one the request's connection never saw, or set
 * before the request's code ran) changes nothing: PostgreSQL refuses it, and the request fails.
 * `made`: the commits noted so far; `inside`: the depth a savepoint set now holds work of.
 */
export function savepointMarksAfter(
  marks: readonly SavepointMark[],
  control: SavepointControl,
  made: number,
  inside: number,
  typeorm = false,
): { marks: SavepointMark[]; undo?: SavepointMark } {
  if (control.kind === 'savepoint') {
    const mark: SavepointMark = { name: control.name, since: made, inside };
    if (typeorm) mark.typeorm = true;
    return { marks: [...marks, mark] };
  }
  const at = marks.map((mark) => mark.name).lastIndexOf(control.name);
  if (at < 0) return { marks: [...marks] };
  if (control.kind === 'release') return { marks: marks.slice(0, at) };
  return { marks: marks.slice(0, at + 1), undo: marks[at] };
}

/**
 * Whether a noted nested commit (the `seq`-th noted, its work living at depth `into`) is undone
 * by a `ROLLBACK TO` of `mark`: noted since the savepoint was set, and living inside it. A
 * commit put off until another's transaction ended (`commitPutOff`) may be noted after a
 * savepoint of that other's was set, yet its work lives around it (`into` shallower): kept.
 */
export function undoneBy(mark: SavepointMark, seq: number, into: number): boolean {
  return seq >= mark.since && into >= mark.inside;
}

/**
 * What becomes of a noted nested commit whose work lives at depth `into` once a nested
 * transaction ended, the runner now at `depthNow`. A RELEASE merges the ended savepoint's work
 * into the one around it: the commit's work now lives no deeper than `depthNow`. A ROLLBACK TO
 * undoes everything inside the savepoint rolled back, the RELEASEs of the commits made in it
 * too: a commit whose work lived deeper than `depthNow` is undone, and never told
 * (`afterTransactionCommit` means durable, adversary 82). Ended neither way (its RELEASE or
 * ROLLBACK TO failed, the depth unchanged), nothing moves: no note lives deeper than the runner.
 */
export function noteAfterEnd(
  into: number,
  depthNow: number,
  end: 'released' | 'rolled-back',
): number | 'undone' {
  if (end === 'rolled-back' && into > depthNow) return 'undone';
  return Math.min(into, depthNow);
}

/**
 * Runs `work` (the broadcast of a nested commit's `afterTransactionCommit`, after the request's
 * COMMIT) with `runner`'s `data` the one it had at that commit (`kept`), then puts back the one
 * it has now (unless `work` set another: a subscriber's, which stays). TypeORM hands a commit's
 * subscribers the runner at that commit, and its `data` then is what the transaction's code
 * left for them: a `save(…, { data })` sets it for its own transaction and puts the old one
 * back once it committed, and a runner used for one transaction per item sets it anew for each
 * (adversary 81); read at the request's COMMIT, it would be the last one set, or the old one
 * back. The runner itself is handed (`event.queryRunner` is the object its code had: a
 * subscriber may key what it keeps by it), so its `data` is swapped for the event, not copied.
 */
export async function withDataAtCommit<T>(
  runner: QueryRunner,
  kept: QueryRunner['data'],
  work: () => Promise<T>,
): Promise<T> {
  const now = runner.data;
  runner.data = kept;
  try {
    return await work();
  } finally {
    if (runner.data === kept) runner.data = now;
  }
}

const logger = new Logger('Idempotency');

/**
 * The `afterTransactionCommit` events of a request's nested commits, each by the query runner
 * (the view: see `runnerView`) the transaction ran on and its `data` at that commit, told once
 * the request's COMMIT (its answer stored with it) succeeded (`tell`), in the order the commits
 * were made; dropped if it rolled back (a retry runs the handler, and so its commits, again).
 */
export class AfterRequestCommit {
  private readonly noted: Noted[] = [];
  /** How many nested commits were noted (each's `seq`). */
  private made = 0;
  /** The savepoints open on the request's connection, its code's own and TypeORM's. */
  private marks: SavepointMark[] = [];

  /**
   * A nested commit whose `afterTransactionCommit` waits for the request's COMMIT, noted at
   * that commit: the runner's `data` is kept as it is now (see `withDataAtCommit`), and `into`
   * is the depth its savepoint was (or, put off, will be) released into.
   */
  note(runner: QueryRunner, into: number): void {
    this.noted.push({ runner, data: runner.data, into, seq: this.made++ });
  }

  /**
   * A savepoint statement sent on the request's connection (`savepointMarksAfter`), at the
   * runner's depth `depth`, by its code (`own`) or TypeORM: a `ROLLBACK TO` of a savepoint of
   * its code's own undoes the nested commits released inside it, as TypeORM's rollback does
   * (adversary 83); they are never told.
   */
  savepointSent(control: SavepointControl, depth: number, own: boolean): void {
    const inside = own ? depth : depth + 1;
    const { marks, undo } = savepointMarksAfter(this.marks, control, this.made, inside, !own);
    this.marks = marks;
    if (!undo) return;
    for (let at = this.noted.length - 1; at >= 0; at--) {
      const noted = this.noted[at]!;
      if (undoneBy(undo, noted.seq, noted.into)) this.noted.splice(at, 1);
    }
  }

  /**
   * A nested transaction ended, the runner now at `depthNow` (`noteAfterEnd`): the commits
   * its rollback undid are dropped; the others now live no deeper than it.
   */
  nestedEnded(depthNow: number, end: 'released' | 'rolled-back'): void {
    // The savepoints set inside the ended one end with it (`marksAfterNestedEnd`).
    this.marks = marksAfterNestedEnd(this.marks, depthNow);
    for (let at = this.noted.length - 1; at >= 0; at--) {
      const noted = this.noted[at]!;
      const next = noteAfterEnd(noted.into, depthNow, end);
      if (next === 'undone') this.noted.splice(at, 1);
      else noted.into = next;
    }
  }

  /**
   * Tells the subscribers, once the request committed, as TypeORM's commit does:
   * `event.queryRunner` is the runner the transaction's code had (the same object), its `data`
   * as it was at that commit (`withDataAtCommit`: what that code left for its subscribers),
   * `event.manager` its manager. The request's transaction is over: what they send through them runs on a
   * connection of its own, as after any answer (see `LazyTransaction.joinedRunner`), the
   * request's back in the pool. Awaited at most `timeoutMs` (the module's deadline): past it
   * the answer goes, and they run on; the key, the answer and the request's connection are
   * never held by them. A subscriber that throws is logged: its commit is durable, and the
   * answer stored with it.
   */
  async tell(dataSource: DataSource, timeoutMs: number): Promise<void> {
    const noted = this.noted.splice(0);
    const subscribers = dataSource.subscribers as unknown as Record<string, unknown>[];
    if (noted.length === 0) return;
    if (!subscribers.some((s) => typeof s.afterTransactionCommit === 'function')) return;
    const all = (async () => {
      for (const { runner, data } of noted) {
        const broadcaster = (
          runner as unknown as { broadcaster: { broadcast(event: string): Promise<void> } }
        ).broadcaster;
        try {
          await withDataAtCommit(runner, data, () =>
            broadcaster.broadcast('AfterTransactionCommit'),
          );
        } catch (error) {
          logger.error(
            `an afterTransactionCommit subscriber failed after the request committed: ${String(error)}`,
          );
        }
      }
    })();
    if (!Number.isFinite(timeoutMs)) return all;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, timeoutMs);
      timer.unref?.();
    });
    await Promise.race([all, bound]).finally(() => clearTimeout(timer));
  }
}
