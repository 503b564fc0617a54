import { type BesideRefusal, NestedIdentity, type NestedEnding } from './nested-identity.js';
import { sqlReaderReady } from '../transaction/sql/sql-parse.js';

beforeAll(() => sqlReaderReady());

const inside = { name: 'inside' };
const beside = { name: 'beside' };
const other = { name: 'other' };

/** One step: a view starts a nested transaction, one ends (the depth after), or a statement. */
type Step =
  | ['start', object, 'beside'?]
  | ['end', number, 'released'?]
  | ['send', object, string, BesideRefusal /* refused */];

describe('NestedIdentity', () => {
  it.each<[string, Step[]]>([
    ['nothing nested: nothing refused', [['send', beside, 'UPDATE t SET n = n + 1', false]]],
    [
      'beside a nested transaction that set a setting for itself (its tenant): refused',
      [
        ['start', inside],
        ['send', inside, "SELECT set_config('request.user', 'alice', true)", false],
        ['send', beside, 'UPDATE t SET n = n + 1', 'settings'],
      ],
    ],
    [
      'beside a nested transaction that set no role nor setting',
      [
        ['start', inside],
        ['send', inside, "SELECT set_config('request.user', 'alice', false)", false],
        ['send', beside, 'UPDATE t SET n = n + 1', false],
      ],
    ],
    [
      'beside one that set its role: refused, reads too; inside: sent',
      [
        ['start', inside],
        ['send', inside, 'SET LOCAL ROLE app_user', false],
        ['send', inside, 'INSERT INTO notes VALUES (1)', false],
        ['send', beside, 'UPDATE t SET n = n + 1', 'identity'],
        ['send', beside, 'SELECT 1', 'identity'],
      ],
    ],
    [
      'the role set as set_config(…, true), or the search path',
      [
        ['start', inside],
        ['send', inside, "SELECT set_config('search_path', 'tenant', true)", false],
        ['send', beside, 'UPDATE t SET n = n + 1', 'identity'],
      ],
    ],
    [
      'set in a savepoint of its own, released: it lasts in the one around it',
      [
        ['start', inside],
        ['start', inside],
        ['send', inside, 'SET LOCAL ROLE app_user', false],
        ['end', 2, 'released'],
        ['send', inside, 'SELECT 1', false],
        ['send', beside, 'SELECT 1', 'identity'],
      ],
    ],
    [
      'set in a savepoint of its own, rolled back: it ended with it',
      [
        ['start', inside],
        ['start', inside],
        ['send', inside, "SELECT set_config('statement_timeout', '50ms', true)", false],
        ['end', 2],
        ['send', beside, 'UPDATE t SET n = n + 1', false],
      ],
    ],
    [
      'beside one its code made read only: refused',
      [
        ['start', inside],
        ['send', inside, 'SET TRANSACTION READ ONLY', false],
        ['send', beside, 'INSERT INTO t VALUES (1)', 'read-only'],
      ],
    ],
    [
      'its own transaction nested in one that set its role, by a view beside it: refused',
      [
        ['start', inside],
        ['send', inside, 'SET LOCAL ROLE app_user', false],
        ['start', beside],
        ['send', beside, 'INSERT INTO t VALUES (1)', 'identity'],
      ],
    ],
    [
      'once the outermost ended (committed or rolled back): sent',
      [
        ['start', inside],
        ['send', inside, 'SET LOCAL ROLE app_user', false],
        ['end', 1],
        ['send', beside, 'UPDATE t SET n = n + 1', false],
      ],
    ],
    [
      'set beside another’s nested transaction: refused (its end puts back what it began with)',
      [
        ['start', inside],
        ['send', beside, 'SET LOCAL ROLE app_user', 'sets-beside'],
        ['send', other, 'UPDATE t SET n = n + 1', false],
      ],
    ],
    [
      'set in its own, begun beside another’s: its own to set',
      [
        ['start', inside],
        ['start', beside],
        ['send', beside, "SELECT set_config('app.tenant', 'acme', true)", false],
        ['send', inside, 'SELECT 1', 'settings'],
      ],
    ],
    [
      'a session setting in its own, begun beside another’s: its own, the other’s refused',
      [
        ['start', inside],
        ['start', beside, 'beside'],
        ['send', beside, "SET app.actor = 'audit'", false],
        ['send', inside, 'INSERT INTO t VALUES (1)', 'settings'],
      ],
    ],
    [
      'a session setting beside one begun beside another’s: refused (it would be seen there)',
      [
        ['start', inside],
        ['start', beside, 'beside'],
        ['send', inside, "SET app.actor = 'order'", 'sets-beside'],
      ],
    ],
    [
      'a session setting in a nested transaction not begun beside another: not counted',
      [
        ['start', inside],
        ['send', inside, "SET app.actor = 'order'", false],
        ['send', beside, 'INSERT INTO t VALUES (1)', false],
      ],
    ],
    [
      'a read beside one made read only: it runs there as apart; a write is refused',
      [
        ['start', inside],
        ['send', inside, 'SET TRANSACTION READ ONLY', false],
        ['send', beside, 'SELECT n FROM t', false],
        ['send', beside, 'UPDATE t SET n = 1', 'read-only'],
      ],
    ],
    [
      'a setting rolled back to its code’s own savepoint: none in force, nothing refused',
      [
        ['start', inside],
        ['send', inside, 'SAVEPOINT try_tenant', false],
        ['send', inside, "SELECT set_config('app.tenant', 'acme', true)", false],
        ['send', beside, 'UPDATE t SET n = 1', 'settings'],
        ['send', inside, 'ROLLBACK TO SAVEPOINT try_tenant', false],
        ['send', beside, 'UPDATE t SET n = 1', false],
      ],
    ],
    [
      'made in one text with its savepoint, then rolled back to it',
      [
        ['start', inside],
        ['send', inside, 'SAVEPOINT a; SET LOCAL ROLE app_user', false],
        ['send', beside, 'SELECT 1', 'identity'],
        ['send', inside, 'ROLLBACK TO a', false],
        ['send', beside, 'SELECT 1', false],
      ],
    ],
    [
      'rolled back to an outer savepoint: what the inner ones set ends too',
      [
        ['start', inside],
        ['send', inside, 'SAVEPOINT a', false],
        ['send', inside, 'SAVEPOINT b', false],
        ['send', inside, "SELECT set_config('app.tenant', 'acme', true)", false],
        ['send', inside, 'ROLLBACK TO SAVEPOINT a', false],
        ['send', beside, 'UPDATE t SET n = 1', false],
      ],
    ],
    [
      'released: what it set lasts in the one around, and a rollback to that one ends it',
      [
        ['start', inside],
        ['send', inside, 'SAVEPOINT a', false],
        ['send', inside, 'SAVEPOINT b', false],
        ['send', inside, "SELECT set_config('app.tenant', 'acme', true)", false],
        ['send', inside, 'RELEASE SAVEPOINT b', false],
        ['send', beside, 'UPDATE t SET n = 1', 'settings'],
        ['send', inside, 'ROLLBACK TO SAVEPOINT a', false],
        ['send', beside, 'UPDATE t SET n = 1', false],
      ],
    ],
    [
      'set before the savepoint, or to a savepoint made before it began: it stays',
      [
        ['send', inside, 'SAVEPOINT before_it', false],
        ['start', inside],
        ['send', inside, "SELECT set_config('app.tenant', 'acme', true)", false],
        ['send', inside, 'SAVEPOINT a', false],
        ['send', inside, 'ROLLBACK TO SAVEPOINT a', false],
        ['send', beside, 'UPDATE t SET n = 1', 'settings'],
        ['send', inside, 'ROLLBACK TO SAVEPOINT before_it', false],
        ['send', beside, 'UPDATE t SET n = 1', 'settings'],
      ],
    ],
    [
      'set in a savepoint of an inner nested transaction committed into its own: it lasts',
      [
        ['start', inside],
        ['start', inside],
        ['send', inside, 'SAVEPOINT a', false],
        ['send', inside, "SELECT set_config('app.tenant', 'acme', true)", false],
        ['end', 2, 'released'],
        ['send', beside, 'UPDATE t SET n = 1', 'settings'],
      ],
    ],
  ])('%s', (_label, steps) => {
    const nested = new NestedIdentity();
    const refused: BesideRefusal[] = [];
    const expected: BesideRefusal[] = [];
    for (const step of steps) {
      if (step[0] === 'start') nested.started(step[1], step[2] === 'beside');
      else if (step[0] === 'end') nested.endedAt(step[1], step[2] === 'released');
      else {
        refused.push(nested.besideIdentity(step[1], step[2]));
        expected.push(step[3]);
      }
    }
    expect(refused).toEqual(expected);
  });
});

/** One step: a view starts a nested transaction, one ends, a statement, or an ending asked. */
type EndStep =
  | ['start', object]
  | ['end', number, 'released'?]
  | ['send', object, string]
  | ['ending', object, 'commit' | 'rollback', NestedEnding];

describe('NestedIdentity.ending', () => {
  it.each<[string, EndStep[]]>([
    [
      'its own, nothing beside: ends',
      [
        ['start', inside],
        ['send', inside, 'INSERT INTO t VALUES (1)'],
        ['ending', inside, 'rollback', 'ok'],
        ['ending', inside, 'commit', 'ok'],
      ],
    ],
    [
      'a write beside it: its rollback took that along; its commit keeps both',
      [
        ['start', inside],
        ['send', beside, 'INSERT INTO t VALUES (1)'],
        ['ending', inside, 'rollback', 'beside'],
        ['ending', inside, 'commit', 'ok'],
      ],
    ],
    [
      'a plain read beside it: rolled back, it loses nothing',
      [
        ['start', inside],
        ['send', beside, 'SELECT n FROM t'],
        ['ending', inside, 'rollback', 'ok'],
      ],
    ],
    [
      'a plain read beside it once it wrote: it may have seen that write',
      [
        ['start', inside],
        ['send', inside, 'INSERT INTO t VALUES (1)'],
        ['send', beside, 'SELECT n FROM t'],
        ['ending', inside, 'rollback', 'beside'],
      ],
    ],
    [
      'its write undone by an inner one of its own rolled back: a read beside sees none',
      [
        ['start', inside],
        ['start', inside],
        ['send', inside, 'INSERT INTO t VALUES (1)'],
        ['end', 2],
        ['send', beside, 'SELECT n FROM t'],
        ['ending', inside, 'rollback', 'ok'],
      ],
    ],
    [
      'its write in an inner one of its own released: a read beside may see it',
      [
        ['start', inside],
        ['start', inside],
        ['send', inside, 'INSERT INTO t VALUES (1)'],
        ['end', 2, 'released'],
        ['send', beside, 'SELECT n FROM t'],
        ['ending', inside, 'rollback', 'beside'],
      ],
    ],
    [
      'a locking read beside it: its lock would go with the rollback',
      [
        ['start', inside],
        ['send', beside, 'SELECT n FROM t FOR UPDATE'],
        ['ending', inside, 'rollback', 'beside'],
      ],
    ],
    [
      'another view’s begun after it and open: neither its commit nor its rollback',
      [
        ['start', inside],
        ['start', other],
        ['ending', inside, 'commit', 'not-innermost'],
        ['ending', inside, 'rollback', 'not-innermost'],
        ['ending', other, 'commit', 'ok'],
      ],
    ],
    [
      'the other’s statement ran inside it: once the other ended, its rollback is refused',
      [
        ['start', inside],
        ['start', other],
        ['send', other, 'INSERT INTO t VALUES (2)'],
        ['end', 2],
        ['ending', inside, 'rollback', 'beside'],
      ],
    ],
    [
      'written before it began: not beside it',
      [
        ['send', beside, 'INSERT INTO t VALUES (1)'],
        ['start', inside],
        ['ending', inside, 'rollback', 'ok'],
      ],
    ],
    [
      'an inner one of its own begun after the write beside: not beside it',
      [
        ['start', inside],
        ['send', beside, 'INSERT INTO t VALUES (1)'],
        ['start', inside],
        ['ending', inside, 'rollback', 'ok'],
        ['end', 2],
        ['ending', inside, 'rollback', 'beside'],
      ],
    ],
  ])('%s', (_label, steps) => {
    const nested = new NestedIdentity();
    const met: NestedEnding[] = [];
    const expected: NestedEnding[] = [];
    for (const step of steps) {
      if (step[0] === 'start') nested.started(step[1]);
      else if (step[0] === 'end') nested.endedAt(step[1], step[2] === 'released');
      else if (step[0] === 'send') nested.markBeside(step[1], step[2]);
      else {
        met.push(nested.ending(step[1], step[2]));
        expected.push(step[3]);
      }
    }
    expect(met).toEqual(expected);
  });
});

describe('NestedIdentity.commitLater: a commit while another begun after it is open', () => {
  /**
   * Views start nested transactions, then commits come (each put off, or not: the view has
   * none open), then the innermost ends: the view whose commit was put off, innermost before
   * and after that end.
   */
  it.each<[string, object[], object[], boolean[], (string | undefined)[]]>([
    ['nothing open of its own: not put off', [inside], [other], [false], [undefined, undefined]],
    [
      'the first of two at once (Promise.all): released once the other ended',
      [inside, other],
      [inside],
      [true],
      [undefined, 'inside'],
    ],
    [
      'two put off in turn: the innermost of them released first',
      [inside, beside, other],
      [inside, beside],
      [true, true],
      [undefined, 'beside'],
    ],
    [
      'its own inner one already put off: its outer one is put off too',
      [inside, inside, other],
      [inside, inside, inside],
      [true, true, false],
      [undefined, 'inside'],
    ],
  ])('%s', (_case, started, committing, expected, innermostAround) => {
    const identity = new NestedIdentity();
    for (const view of started) identity.started(view);
    expect(committing.map((view) => identity.commitLater(view))).toEqual(expected);
    const name = () => (identity.committedInnermost() as { name?: string } | undefined)?.name;
    const seen = [name()];
    identity.endedAt(started.length);
    seen.push(name());
    expect(seen).toEqual(innermostAround);
  });
});

describe('NestedIdentity.besideAll: a transaction of its own begun beside the open ones', () => {
  it.each<[string, object[], object, boolean]>([
    ['nothing open: not beside anything', [], beside, false],
    ['its own view nests (manager.transaction in its callback)', [inside], inside, false],
    ['another view begins one (dataSource.transaction in the callback)', [inside], beside, true],
    ['a view that began one further out', [beside, inside], beside, false],
    ['a third view', [inside, beside], other, true],
  ])('%s', (_case, started, owner, expected) => {
    const identity = new NestedIdentity();
    for (const view of started) identity.started(view);
    expect(identity.besideAll(owner)).toBe(expected);
  });
});

describe('NestedIdentity: a put-off commit whose subscribers ran then', () => {
  it.each<[string, boolean, boolean, boolean, boolean]>([
    // [case, its subscribers ran when put off, uncommitted after, put off, released without them]
    ['put off, its subscribers run then', true, false, true, true],
    ['put off, its subscribers not run (the RELEASE runs them)', false, false, true, false],
  ])('%s', (_case, ran, uncommitted, putOff, releasedWithout) => {
    const identity = new NestedIdentity();
    identity.started(inside);
    identity.started(other);
    expect(identity.hasUncommitted(inside)).toBe(true);
    expect(identity.commitLater(inside, ran)).toBe(true);
    expect(identity.hasUncommitted(inside)).toBe(uncommitted);
    expect(identity.putOff(inside)).toBe(putOff);
    // Not the innermost yet: nothing to release.
    expect(identity.ranSubscribersOf(inside)).toBe(false);
    identity.endedAt(2);
    expect(identity.ranSubscribersOf(inside)).toBe(releasedWithout);
  });
});

describe("NestedIdentity.hasUncommitted: what a view's isTransactionActive says (adversary 80b)", () => {
  /** A step: `inside` starts, commits (put off or not: `later`), or the runner is back at a depth. */
  type ActiveStep = ['start'] | ['commit-later'] | ['end', number];
  it.each<[string, ActiveStep[], boolean]>([
    ['before its own start: none open', [], false],
    ['after its own start: open', [['start']], true],
    ['after its own commit (RELEASE): none', [['start'], ['end', 1]], false],
    [
      'after its commit put off (committed for its code): none',
      [['start'], ['commit-later']],
      false,
    ],
    [
      'its second, inside its first committed later: open',
      [['start'], ['start'], ['commit-later']],
      true,
    ],
    ['after its rollback: none', [['start'], ['start'], ['end', 2], ['end', 1]], false],
  ])('%s', (_name, steps, expected) => {
    const identity = new NestedIdentity();
    for (const step of steps) {
      if (step[0] === 'start') identity.started(inside);
      else if (step[0] === 'commit-later') identity.commitLater(inside);
      else identity.endedAt(step[1]);
    }
    expect(identity.hasUncommitted(inside)).toBe(expected);
    expect(identity.hasUncommitted(beside)).toBe(false);
  });
});
