import { isPlainRead, localSettingsOf, setsIdentity } from '../transaction/sql/sql-text.js';

/** A nested transaction of the app's code on the request's TypeORM runner. */
interface NestedTransaction {
  /** The view of the runner that started it: its code's statements come through it. */
  owner: object;
  /**
   * Its code set the role, session authorization or search path in it (`SET LOCAL ROLE`): a
   * statement beside it, which runs inside it on the request's one connection, would run as
   * that role, where without the library it runs on a connection of its own.
   */
  setIdentity: boolean;
  /**
   * Its code set a setting for the transaction in it (`SET LOCAL statement_timeout`,
   * `set_config('app.tenant', …, true)`): a statement beside it would run under it.
   */
  localSettings: boolean;
  /**
   * A statement not of its code (sent through another view while it was open) ran inside it,
   * on the request's one connection: if it rolls back, it takes that statement along, where
   * without the library the statement would have committed on a connection of its own.
   */
  beside: boolean;
}

/**
 * What a view's commit or rollback of its nested transaction meets: `ok`; `not-innermost`
 * when the innermost open one is another view's (savepoints end in order: ending its own
 * would end, or roll back, the other's too); `beside` for a rollback of one holding a
 * statement not its own.
 */
export type NestedEnding = 'ok' | 'not-innermost' | 'beside';

/**
 * The nested transactions open on the request's TypeORM runner, outermost first, by the view
 * of the runner that started each (see `runnerView`): TypeORM's `dataSource.transaction()`
 * asks for a runner, starts a transaction on it and hands its code the runner's manager, so
 * its code's statements come through that view, and a statement beside it (`dataSource.query`,
 * a repository, while it is open) through another. The pool seam's `Savepoint.setIdentity`,
 * for TypeORM.
 */
export class NestedIdentity {
  private readonly open: NestedTransaction[] = [];

  /**
   * Whether `owner` began none of the open nested transactions: one it starts now is a
   * transaction of its own begun beside them (a `dataSource.transaction()` inside another's
   * callback), which without the library would run on a connection of its own.
   */
  besideAll(owner: object): boolean {
    return this.open.length > 0 && !this.open.some((nested) => nested.owner === owner);
  }

  /** `owner` started a nested transaction. */
  started(owner: object): void {
    this.open.push({ owner, setIdentity: false, localSettings: false, beside: false });
  }

  /**
   * The runner's transaction depth after a nested transaction ended (committed, rolled back,
   * or failed to): those deeper are no longer open (depth 1 is the request's own).
   */
  endedAt(depth: number): void {
    if (this.open.length > depth - 1) this.open.length = Math.max(0, depth - 1);
  }

  /**
   * `text`, sent through `from`, runs inside every open nested transaction: those not of
   * `from` are marked (see `beside`). A plain read is not: rolled back, it loses nothing.
   * The pool seam's `markBeside`, for TypeORM.
   */
  markBeside(from: object, text: unknown): void {
    const others = this.open.filter((nested) => nested.owner !== from && !nested.beside);
    if (others.length === 0 || isPlainRead(text)) return;
    for (const nested of others) nested.beside = true;
  }

  /** Whether the innermost open nested transaction is `from`'s (started through it). */
  ownsInnermost(from: object): boolean {
    return this.open[this.open.length - 1]?.owner === from;
  }

  /** What `from` ending its innermost nested transaction (`how`) meets: see `NestedEnding`. */
  ending(from: object, how: 'commit' | 'rollback'): NestedEnding {
    const innermost = this.open[this.open.length - 1];
    if (!innermost) return 'ok';
    if (innermost.owner !== from) return 'not-innermost';
    return how === 'rollback' && innermost.beside ? 'beside' : 'ok';
  }

  /**
   * Whether `text`, sent through `from`, is beside an open nested transaction that set its
   * identity (`identity`) or a setting for itself (`settings`), and is to be refused. When it
   * is not, and it sets either inside a nested transaction of `from`'s, that transaction is
   * marked, as its outermost: a `SET LOCAL` made in a savepoint lasts until the outermost one
   * ends. The pool seam's `refuseBesideIdentity`, for TypeORM.
   */
  besideIdentity(
    from: object,
    text: unknown,
    values?: readonly unknown[],
  ): 'identity' | 'settings' | false {
    if (this.open.length === 0) return false;
    const others = this.open.filter((nested) => nested.owner !== from);
    if (others.some((nested) => nested.setIdentity)) return 'identity';
    if (others.some((nested) => nested.localSettings)) return 'settings';
    const own = this.open.find((nested) => nested.owner === from);
    if (own && setsIdentity(text)) own.setIdentity = true;
    if (own && localSettingsOf(text, values).length > 0) own.localSettings = true;
    return false;
  }
}
