import { type SavepointControl } from '../transaction/sql/sql-text.js';
import { TransactionControlRefusedError } from '../transaction/seam-errors.js';

/**
 * Why a savepoint statement its code wrote by hand (`qr.query('SAVEPOINT step')`) is refused:
 * several query runners share the request's one connection, where without the library each
 * has its own, and this statement would reach another runner's savepoints or work there.
 * - `set-inside-other`: a `SAVEPOINT` while another runner's transaction, begun after this
 *   runner's, is open: it is set inside that one's savepoint, whose commit ends it too.
 * - `reaches-other`: a `RELEASE` / `ROLLBACK TO` whose name is, on the connection, the
 *   latest of another runner's (PostgreSQL reads a name as the latest of that name).
 * - `takes-other`: a `ROLLBACK TO` of its own savepoint after another runner wrote, or began
 *   a transaction, inside it: that work would be undone with it, where without the library
 *   it is kept on a connection of its own.
 * - `ends-other`: a `RELEASE` of its own savepoint while another runner's transaction begun
 *   inside it is open: that transaction's savepoint would end with it.
 */
export type SavepointRefusal = 'set-inside-other' | 'reaches-other' | 'takes-other' | 'ends-other';

/**
 * The owner of what a runner with no transaction of its own open sends (`dataSource.query()`,
 * a repository's statement outside a transaction): the request's own code, whose statements
 * all run in the request's transaction, whichever runner TypeORM took for each. Its
 * savepoints are one code's: set by one `dataSource.query()`, rolled back to by another.
 */
export const REQUEST_CODE: object = Object.freeze({ owner: 'the request' });

/** A savepoint its code set by hand, open on the request's connection. */
interface OwnSavepoint {
  owner: object;
  name: string;
  /** The runner's transaction depth it was set at. */
  depth: number;
  /** Another runner wrote, or began a transaction, since it was set (inside it). */
  othersInside: boolean;
}

/** What the connection looks like around a statement being judged (from `NestedIdentity`). */
export interface Around {
  /** Whether the innermost open nested transaction is another runner's. */
  innermostOthers: boolean;
  /** Whether another runner has an open nested transaction deeper than `depth`. */
  othersDeeperThan(depth: number): boolean;
}

/**
 * The savepoints its code sets by hand through its query runners, by runner, as PostgreSQL
 * holds them on the request's one connection (one stack for all runners): what a savepoint
 * statement of one runner would do to another's savepoints or work, judged before it is sent
 * (`refusalOf`), and noted once it ran (`ran`). Refused where the outcome would differ from
 * without the library (adversary 85): there is no connection of its own to give each runner,
 * since their writes commit with the answer.
 */
export class RunnerSavepoints {
  private marks: OwnSavepoint[] = [];

  /** Whether `control`, sent by `owner`'s code, is to be refused, and why. */
  refusalOf(
    owner: object,
    control: SavepointControl,
    around: Around,
  ): SavepointRefusal | undefined {
    if (control.kind === 'savepoint')
      return around.innermostOthers ? 'set-inside-other' : undefined;
    const mark = this.latest(control.name);
    // A name none was set under here: PostgreSQL's to answer (it refuses an unknown one).
    if (!mark) return undefined;
    if (mark.owner !== owner) return 'reaches-other';
    if (control.kind === 'rollback-to') {
      return mark.othersInside || around.othersDeeperThan(mark.depth) ? 'takes-other' : undefined;
    }
    return around.othersDeeperThan(mark.depth) ? 'ends-other' : undefined;
  }

  /** `control`, sent by `owner`'s code at the runner's depth `depth`, ran. */
  ran(owner: object, control: SavepointControl, depth: number): void {
    if (control.kind === 'savepoint') {
      this.marks.push({ owner, name: control.name, depth, othersInside: false });
      return;
    }
    const at = this.marks.lastIndexOf(this.latest(control.name)!);
    if (at < 0) return;
    // RELEASE ends it and those after it; ROLLBACK TO keeps it, and undoes what was inside.
    this.marks.splice(control.kind === 'release' ? at : at + 1);
    if (control.kind === 'rollback-to') this.marks[at]!.othersInside = false;
  }

  /**
   * `owner` wrote, or began a transaction: inside every open savepoint of another runner's
   * transaction. (One of the request's own code, `REQUEST_CODE`, holds the request's work,
   * all of it: no runner's work is apart from it without the library either.)
   */
  workOf(owner: object): void {
    for (const mark of this.marks) {
      if (mark.owner !== owner && mark.owner !== REQUEST_CODE) mark.othersInside = true;
    }
  }

  /** A nested transaction ended, the runner now at `depthNow`: those set inside it ended. */
  nestedEnded(depthNow: number): void {
    this.marks = this.marks.filter((mark) => mark.depth <= depthNow);
  }

  private latest(name: string): OwnSavepoint | undefined {
    for (let at = this.marks.length - 1; at >= 0; at--) {
      if (this.marks[at]!.name === name) return this.marks[at];
    }
    return undefined;
  }
}

/**
 * Thrown to code whose hand-written savepoint statement would reach another query runner's
 * savepoints or work on the idempotent request's one connection (see `SavepointRefusal`).
 */
export class SavepointAcrossRunnersError extends TransactionControlRefusedError {
  constructor(
    readonly reason: SavepointRefusal,
    statement: string,
  ) {
    super(statement);
    const what = {
      'set-inside-other':
        'it would be set inside the transaction another query runner began after this ' +
        'one’s, which is still open: that transaction’s commit would end it',
      'reaches-other':
        'its name is, on the connection, another query runner’s latest savepoint of that ' +
        'name: it would release or roll back that one',
      'takes-other':
        'another query runner wrote, or began a transaction, inside it since it was set: ' +
        'the rollback would undo that work too',
      'ends-other':
        'another query runner’s transaction, begun inside it, is still open: the release ' +
        'would end that transaction’s savepoint',
    }[reason];
    this.message =
      `${statement} refused: the idempotent request’s query runners share its one ` +
      `connection, where without the library each has its own, and ${what}. The request ` +
      'rolls back. Use hand-written savepoints in one query runner at a time (end the other ' +
      'runner’s transaction first, or start it after), or use TypeORM’s nested transactions ' +
      '(a query runner’s startTransaction() inside its transaction, manager.transaction()), ' +
      'which the library keeps apart.';
    this.name = 'SavepointAcrossRunnersError';
  }
}
