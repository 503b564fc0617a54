import {
  isPlainRead,
  localSettingsOf,
  type SavepointControl,
  savepointControlsOf,
  sessionSettingsOf,
  setsIdentity,
  setsReadOnly,
} from '../transaction/sql/sql-text.js';

/** What its code set inside a savepoint (see `NestedTransaction.inner`). */
interface Sets {
  /** The role, session authorization or search path, for the transaction. */
  setIdentity: boolean;
  /** A setting, for the transaction. */
  localSettings: boolean;
}

/** A savepoint its code made inside a nested transaction (`SAVEPOINT try_tenant`). */
interface InnerSavepoint extends Sets {
  name: string;
}

/** A nested transaction of the app's code on the request's TypeORM runner. */
interface NestedTransaction {
  /** The view of the runner that started it: its code's statements come through it. */
  owner: object;
  /**
   * Begun beside another's (see `besideAll`): without the library it runs on a connection of
   * its own, so a setting its code makes for the session (`SET app.actor = …`) is as much its
   * own as one for the transaction, while it is open (its COMMIT puts it back).
   */
  begunBeside: boolean;
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
  /** A statement of its code that is not a plain read ran in it: a read beside may see it. */
  wrote: boolean;
  /** Its code made it read only (`SET TRANSACTION READ ONLY`): a write beside is refused there. */
  readOnly: boolean;
  /**
   * Its code committed it while another view's, begun after it, was still open (see
   * `commitLater`): its savepoint is released once the ones after it have ended.
   */
  committed: boolean;
  /**
   * Whether its commit's subscribers (`beforeTransactionCommit`, `afterTransactionCommit`) ran
   * when its code's commit was put off, as TypeORM's commit runs them: its RELEASE, later,
   * runs them no more (see `LazyTransaction.commitPutOff`).
   */
  subscribersRan: boolean;
  /**
   * The savepoints its code made in it (`SAVEPOINT x`, as `pg` users write them), innermost
   * last: what its code sets inside one is noted there, so that a `ROLLBACK TO SAVEPOINT x`,
   * which undoes it, undoes the note (see `noteSavepoint`); a `RELEASE` keeps it in the one
   * around.
   */
  inner: InnerSavepoint[];
}

/** Whether `nested` has its role (`identity`) or a setting set now, in it or its savepoints. */
function hasSet(nested: NestedTransaction, what: keyof Sets): boolean {
  return nested[what] || nested.inner.some((savepoint) => savepoint[what]);
}

/** What a statement beside open nested transactions is refused for, if anything. */
export type BesideRefusal = 'identity' | 'read-only' | 'settings' | 'sets-beside' | false;

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

  /** `owner` started a nested transaction (`begunBeside`: beside another's, see `besideAll`). */
  started(owner: object, begunBeside = false): void {
    this.open.push({
      owner,
      begunBeside,
      setIdentity: false,
      localSettings: false,
      beside: false,
      wrote: false,
      readOnly: false,
      committed: false,
      subscribersRan: false,
      inner: [],
    });
  }

  /**
   * `owner` commits its innermost nested transaction not yet committed while another view's,
   * begun after it, is open (`ending` answers `not-innermost`: two `dataSource.transaction()`
   * under `Promise.all`, the first done first). Without the library each has a connection of
   * its own, and the first's COMMIT does not wait for the second. Here the savepoints are one
   * stack, and releasing the first's now would release the other's with it: the commit is
   * put off, its savepoint released once those after it have ended (`committedInnermost`).
   * Nothing can roll it back meanwhile but a rollback already refused: one around it holds its
   * statements (`beside`). False when `owner` has none open to commit.
   */
  commitLater(owner: object, subscribersRan = false): boolean {
    for (let at = this.open.length - 1; at >= 0; at--) {
      const nested = this.open[at];
      if (nested.owner !== owner || nested.committed) continue;
      nested.committed = true;
      nested.subscribersRan = subscribersRan;
      return true;
    }
    return false;
  }

  /** Whether `owner` has a nested transaction open whose commit was not asked yet. */
  hasUncommitted(owner: object): boolean {
    return this.open.some((nested) => nested.owner === owner && !nested.committed);
  }

  /**
   * Whether the innermost open nested transaction is `owner`'s, put off (`commitLater`) with
   * its commit's subscribers run then.
   */
  ranSubscribersOf(owner: object): boolean {
    const innermost = this.open[this.open.length - 1];
    return innermost?.owner === owner && innermost.committed && innermost.subscribersRan;
  }

  /** Whether `owner`'s innermost open nested transaction is one whose commit was put off. */
  putOff(owner: object): boolean {
    const depth = this.depthOf(owner);
    return depth !== undefined && this.open[depth - 2].committed;
  }

  /** The view whose commit was put off (`commitLater`), once its transaction is the innermost. */
  committedInnermost(): object | undefined {
    const innermost = this.open[this.open.length - 1];
    return innermost?.committed ? innermost.owner : undefined;
  }

  /**
   * The runner's transaction depth after a nested transaction ended (committed, rolled back,
   * or failed to): those deeper are no longer open (depth 1 is the request's own). Committed
   * (`released`) into one of the same code, what it wrote and set lasts in that one, as a
   * savepoint's RELEASE keeps it; rolled back, it ends with it.
   */
  endedAt(depth: number, released = false): void {
    const kept = Math.max(0, depth - 1);
    if (this.open.length <= kept) return;
    const ended = this.open.splice(kept);
    const around = this.open[this.open.length - 1];
    if (!released || !around) return;
    for (const nested of ended) {
      // Begun beside it (another's code): its own COMMIT puts back what it set, and its
      // writes were marked on this one as they were sent (see `markBeside`).
      if (nested.owner !== around.owner) continue;
      around.wrote ||= nested.wrote;
      const sets = around.inner[around.inner.length - 1] ?? around;
      sets.setIdentity ||= hasSet(nested, 'setIdentity');
      sets.localSettings ||= hasSet(nested, 'localSettings');
    }
  }

  /** The runner's depth of `owner`'s innermost open nested transaction, if it has one. */
  depthOf(owner: object): number | undefined {
    for (let at = this.open.length - 1; at >= 0; at--) {
      if (this.open[at].owner === owner) return at + 2;
    }
    return undefined;
  }

  /**
   * `text`, sent through `from`, runs inside every open nested transaction: those not of
   * `from` are marked (see `beside`). A plain read loses nothing rolled back, but may have
   * seen what one of them wrote (which without the library it would not): it marks only
   * those that wrote. A write marks `from`'s own innermost as written. The pool seam's
   * `markBeside`, for TypeORM.
   */
  markBeside(from: object, text: unknown): void {
    if (this.open.length === 0) return;
    const read = isPlainRead(text);
    for (const nested of this.open) {
      if (nested.owner !== from && (!read || nested.wrote)) nested.beside = true;
    }
    if (!read) {
      const own = this.innermostOf(from);
      if (own) own.wrote = true;
    }
  }

  private innermostOf(owner: object): NestedTransaction | undefined {
    const depth = this.depthOf(owner);
    return depth === undefined ? undefined : this.open[depth - 2];
  }

  /**
   * Whether a nested transaction of another than `owner` is open at a runner's depth deeper
   * than `depth` (begun after a savepoint `owner`'s code set at `depth`: inside it).
   */
  othersDeeperThan(owner: object, depth: number): boolean {
    return this.open.some((nested, at) => at + 2 > depth && nested.owner !== owner);
  }

  /** Whether a nested transaction is open and the innermost is not `from`'s. */
  innermostOthers(from: object): boolean {
    const innermost = this.open[this.open.length - 1];
    return innermost !== undefined && innermost.owner !== from;
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
   * identity (`identity`), began read only (`read-only`) or set a setting for itself
   * (`settings`; for one begun beside another, for the session too), and is to be refused. When it is not, and it sets one of those inside a
   * nested transaction of `from`'s, its innermost is marked: rolled back, that ends with it;
   * committed into another of its code, it passes to that one (see `endedAt`). The pool
   * seam's `refuseBesideIdentity`, for TypeORM.
   */
  besideIdentity(from: object, text: unknown, values?: readonly unknown[]): BesideRefusal {
    if (this.open.length === 0) return false;
    const others = this.open.filter((nested) => nested.owner !== from);
    if (others.some((nested) => hasSet(nested, 'setIdentity'))) return 'identity';
    // A read beside one made read only runs there as it would apart: only a write is refused.
    if (others.some((nested) => nested.readOnly) && !isPlainRead(text)) return 'read-only';
    if (others.some((nested) => hasSet(nested, 'localSettings'))) return 'settings';
    const identity = setsIdentity(text);
    const session = sessionSettingsOf(text, values).length > 0;
    // A setting for the session counts as its own where its code runs in a transaction begun
    // beside another's (which, on a connection of its own without the library, the other's
    // code never sees), and beside one (where it would be seen inside it).
    const ownBeside = this.open.some((nested) => nested.owner === from && nested.begunBeside);
    const settings = localSettingsOf(text, values).length > 0 || (session && ownBeside);
    // Set inside another's nested transaction (the innermost, begun beside its own or with
    // none of its own open): that one's end would put back what it began with.
    const innermost = this.open[this.open.length - 1];
    if (innermost && innermost.owner !== from) {
      if (identity || settings || (session && innermost.begunBeside)) return 'sets-beside';
    }
    const own = this.innermostOf(from);
    if (!own) return false;
    // Its own savepoints first (a text may hold `SAVEPOINT x; SET LOCAL …`): what it sets is
    // then noted in the innermost, which its `ROLLBACK TO` undoes. (`ROLLBACK TO x; SET LOCAL`
    // in one text is noted after the rollback: a refusal too many, never one too few.)
    for (const control of savepointControlsOf(text) ?? []) {
      if (control) noteSavepoint(own, control);
    }
    const sets = own.inner[own.inner.length - 1] ?? own;
    if (identity) sets.setIdentity = true;
    if (settings) sets.localSettings = true;
    if (setsReadOnly(text)) own.readOnly = true;
    return false;
  }
}

/**
 * Its code's own `SAVEPOINT x`, `RELEASE x` or `ROLLBACK TO x` in `nested`, as PostgreSQL
 * reads them: `ROLLBACK TO` undoes what was set since `x` (and ends the savepoints made after
 * it; `x` stays), `RELEASE` ends `x` and those after it, keeping what they set in the one
 * around. A name it did not make in `nested` (one made before it began) is left alone.
 */
function noteSavepoint(nested: NestedTransaction, control: SavepointControl): void {
  if (control.kind === 'savepoint') {
    nested.inner.push({
      name: control.name,
      setIdentity: false,
      localSettings: false,
    });
    return;
  }
  const at = nested.inner.map((savepoint) => savepoint.name).lastIndexOf(control.name);
  if (at < 0) return;
  const ended = nested.inner.splice(control.kind === 'release' ? at : at + 1);
  if (control.kind === 'rollback-to') {
    nested.inner[at].setIdentity = false;
    nested.inner[at].localSettings = false;
    return;
  }
  const around = nested.inner[nested.inner.length - 1] ?? nested;
  around.setIdentity ||= ended.some((savepoint) => savepoint.setIdentity);
  around.localSettings ||= ended.some((savepoint) => savepoint.localSettings);
}
