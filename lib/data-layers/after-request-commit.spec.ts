import { type DataSource, type QueryRunner } from 'typeorm';
import { type SavepointControl } from '../transaction/sql/sql-text.js';
import {
  AfterRequestCommit,
  controlsRan,
  marksAfterNestedEnd,
  noteAfterEnd,
  type SavepointMark,
  savepointMarksAfter,
  type TextOutcome,
  undoneBy,
  whenTold,
  withDataAtCommit,
} from './after-request-commit.js';

describe("whenTold: when a nested transaction's event reaches TypeORM's subscribers", () => {
  it.each<[string, 'now' | 'after-request-commit']>([
    ['BeforeTransactionStart', 'now'],
    ['AfterTransactionStart', 'now'],
    // May still write in the transaction, or refuse its commit: at the RELEASE.
    ['BeforeTransactionCommit', 'now'],
    // "Committed": durable only at the request's COMMIT (adversary 80b).
    ['AfterTransactionCommit', 'after-request-commit'],
    ['BeforeTransactionRollback', 'now'],
    // Its savepoint's rollback is real at once.
    ['AfterTransactionRollback', 'now'],
  ])('%s: %s', (event, expected) => {
    expect(whenTold(event)).toBe(expected);
  });
});

describe('withDataAtCommit: a later afterTransactionCommit reads the data of its commit (adversary 81)', () => {
  it.each<[string, object, ((runner: QueryRunner) => void) | undefined, object]>([
    ['its data left as it was', { item: 'a' }, undefined, { item: 'a' }],
    // One runner, one transaction per item: the next item's set after this commit.
    ['its data set anew after', { item: 'b' }, undefined, { item: 'b' }],
    // `save(…, { data })`: TypeORM puts the old one back once it committed.
    ['its data put back after', {}, undefined, {}],
    // A subscriber that sets the runner's data: its own, kept.
    [
      'a subscriber set another',
      { item: 'b' },
      (runner) => (runner.data = { sent: true }),
      { sent: true },
    ],
  ])('%s', async (_name, now, subscriberSets, after) => {
    const kept = { item: 'a' };
    const runner = { data: now } as unknown as QueryRunner;
    const seen = await withDataAtCommit(runner, kept, () => {
      const read: unknown = runner.data;
      subscriberSets?.(runner);
      return Promise.resolve(read);
    });
    // The runner itself, with the data of its commit, then as it was (or as the subscriber left it).
    expect(seen).toBe(kept);
    expect(runner.data).toEqual(after);
  });

  it('puts the data back when a subscriber throws', async () => {
    const now = { item: 'b' };
    const runner = { data: now } as unknown as QueryRunner;
    await expect(
      withDataAtCommit(runner, { item: 'a' }, () => Promise.reject(new Error('bus down'))),
    ).rejects.toThrow('bus down');
    expect(runner.data).toBe(now);
  });
});

describe('noteAfterEnd: a noted nested commit once a nested transaction ended (adversary 82)', () => {
  it.each<[string, number, number, 'released' | 'rolled-back', number | 'undone']>([
    // Released into the enclosing savepoint (depth 2), which is then rolled back to depth 1.
    ['its enclosing savepoint rolled back', 2, 1, 'rolled-back', 'undone'],
    // Three deep: rolled back past both savepoints.
    ['rolled back past it', 3, 1, 'rolled-back', 'undone'],
    // A savepoint begun after it rolled back: its work lives around that one.
    ['a later savepoint rolled back', 2, 2, 'rolled-back', 2],
    ['released into the request (depth 1): only its ROLLBACK undoes it', 1, 1, 'rolled-back', 1],
    // Its enclosing savepoint released: its work moves out with it…
    ['its enclosing savepoint released', 3, 2, 'released', 2],
    ['released into the request', 2, 1, 'released', 1],
    // …so a savepoint begun later at its old depth, rolled back, does not undo it.
    ['a deeper release leaves it where it is', 2, 3, 'released', 2],
    // A RELEASE or ROLLBACK TO that failed: the depth unchanged, nothing moves.
    ['an end that failed', 2, 2, 'rolled-back', 2],
  ])('%s', (_name, into, depthNow, end, expected) => {
    expect(noteAfterEnd(into, depthNow, end)).toBe(expected);
  });
});

describe('savepointMarksAfter: the savepoints open after a savepoint statement (adversary 83)', () => {
  const mark = (name: string, since: number, inside = 2): SavepointMark => ({
    name,
    since,
    inside,
  });
  it.each<
    [string, SavepointMark[], SavepointControl, { marks: SavepointMark[]; undo?: SavepointMark }]
  >([
    ['a savepoint set', [], { kind: 'savepoint', name: 'a' }, { marks: [mark('a', 3)] }],
    [
      'the same name set again: a newer one',
      [mark('a', 0)],
      { kind: 'savepoint', name: 'a' },
      { marks: [mark('a', 0), mark('a', 3)] },
    ],
    // RELEASE keeps what was done in it, and ends the ones set after it.
    ['released', [mark('a', 0), mark('b', 1)], { kind: 'release', name: 'a' }, { marks: [] }],
    [
      'the latest of a name released',
      [mark('a', 0), mark('a', 1)],
      { kind: 'release', name: 'a' },
      { marks: [mark('a', 0)] },
    ],
    // ROLLBACK TO keeps it, ends the ones after it, and undoes what was noted since it.
    [
      'rolled back to',
      [mark('a', 0), mark('b', 1), mark('c', 2)],
      { kind: 'rollback-to', name: 'b' },
      { marks: [mark('a', 0), mark('b', 1)], undo: mark('b', 1) },
    ],
    [
      'the latest of a name rolled back to',
      [mark('a', 0), mark('a', 2)],
      { kind: 'rollback-to', name: 'a' },
      { marks: [mark('a', 0), mark('a', 2)], undo: mark('a', 2) },
    ],
    // A name never set here: PostgreSQL refuses it; nothing changes.
    [
      'an unknown release',
      [mark('a', 0)],
      { kind: 'release', name: 'x' },
      { marks: [mark('a', 0)] },
    ],
    [
      'an unknown rollback',
      [mark('a', 0)],
      { kind: 'rollback-to', name: 'x' },
      { marks: [mark('a', 0)] },
    ],
  ])('%s', (_name, marks, control, expected) => {
    expect(savepointMarksAfter(marks, control, 3, 2)).toEqual(expected);
  });
});

describe('controlsRan: the savepoint statements of a text PostgreSQL ran (adversary 85)', () => {
  const release: SavepointControl = { kind: 'release', name: 's' };
  const set: SavepointControl = { kind: 'savepoint', name: 'a' };
  it.each<[string, (SavepointControl | null)[], TextOutcome, SavepointControl[]]>([
    ['a RELEASE that ran', [release], 'ran', [release]],
    ['a RELEASE refused in an aborted transaction', [release], 'aborted', []],
    ['a RELEASE that failed (no such savepoint)', [release], 'failed', []],
    ['INSERT; RELEASE, failed: stopped before the RELEASE', [null, release], 'failed', []],
    ['SAVEPOINT; INSERT, failed at the INSERT: the SAVEPOINT ran', [set, null], 'failed', [set]],
    [
      'SAVEPOINT; INSERT; RELEASE, failed: the SAVEPOINT only',
      [set, null, release],
      'failed',
      [set],
    ],
    ['SAVEPOINT; INSERT; RELEASE, ran', [set, null, release], 'ran', [set, release]],
    ['SAVEPOINT; INSERT, aborted: nothing ran', [set, null], 'aborted', []],
  ])('%s', (_name, controls, outcome, expected) => {
    expect(controlsRan(controls, outcome)).toEqual(expected);
  });
});

describe('marksAfterNestedEnd: the savepoints left once a TypeORM nested transaction ended (adversary 85)', () => {
  const own = (name: string, inside: number): SavepointMark => ({ name, since: 0, inside });
  const typeorm = (name: string, inside: number): SavepointMark => ({
    name,
    since: 0,
    inside,
    typeorm: true,
  });
  it.each<[string, SavepointMark[], number, SavepointMark[]]>([
    // Its RELEASE (or ROLLBACK TO) was read by `savepointMarksAfter` first.
    ['released: the ones around it stay', [own('a', 1)], 1, [own('a', 1)]],
    [
      // PostgreSQL keeps a savepoint rolled back to; TypeORM never releases it.
      'rolled back to: its savepoint stays',
      [own('a', 1), typeorm('typeorm_1', 2)],
      1,
      [own('a', 1), typeorm('typeorm_1', 1)],
    ],
    [
      // An earlier rollback's left under the one since set and released.
      'released over one an earlier rollback left: that one stays',
      [typeorm('typeorm_1', 2)],
      1,
      [typeorm('typeorm_1', 1)],
    ],
    [
      // Its end statement not read (not sent as such): what was set inside it ends with it.
      'set inside it: ended with it',
      [own('a', 1), own('inner', 2), typeorm('typeorm_2', 3)],
      1,
      [own('a', 1)],
    ],
    [
      'a deeper one ended',
      [typeorm('typeorm_1', 2), typeorm('typeorm_2', 3)],
      2,
      [typeorm('typeorm_1', 2), typeorm('typeorm_2', 2)],
    ],
  ])('%s', (_name, marks, depthNow, expected) => {
    expect(marksAfterNestedEnd(marks, depthNow)).toEqual(expected);
  });
});

describe('undoneBy: a noted nested commit and a ROLLBACK TO (adversary 83)', () => {
  it.each<[string, SavepointMark, number, number, boolean]>([
    // SAVEPOINT attempt (depth 2), a nested commit released into depth 2, ROLLBACK TO attempt.
    ['committed inside it', { name: 'attempt', since: 0, inside: 2 }, 0, 2, true],
    ['committed deeper inside it', { name: 'attempt', since: 0, inside: 2 }, 1, 3, true],
    // Noted before the savepoint was set: its work is before it.
    ['committed before it', { name: 'attempt', since: 1, inside: 2 }, 0, 2, false],
    // A commit put off, noted after it was set, but its work lives around it.
    ['put off, living around it', { name: 'b', since: 0, inside: 3 }, 0, 1, false],
    // TypeORM's nested transaction's savepoint (its work one deeper), rolled back to by name.
    ["TypeORM's, committed inside it", { name: 'typeorm_1', since: 0, inside: 3 }, 0, 3, true],
    ["TypeORM's, released past it", { name: 'typeorm_1', since: 0, inside: 3 }, 0, 2, false],
  ])('%s', (_name, mark, seq, into, expected) => {
    expect(undoneBy(mark, seq, into)).toBe(expected);
  });
});

describe("AfterRequestCommit: what is told after the request's COMMIT, its code's savepoints seen (adversary 83)", () => {
  type Step =
    | ['commit', string, number]
    | ['sent', SavepointControl['kind'], string, number, 'own' | 'typeorm']
    | ['ended', number, 'released' | 'rolled-back'];
  it.each<[string, Step[], string[]]>([
    [
      // SAVEPOINT attempt; a nested commit released into depth 2; ROLLBACK TO attempt.
      'a nested commit inside its own savepoint, rolled back to',
      [
        ['sent', 'savepoint', 'attempt', 2, 'own'],
        ['commit', 'inner', 2],
        ['sent', 'rollback-to', 'attempt', 2, 'own'],
        ['ended', 1, 'released'],
        ['commit', 'outer', 1],
      ],
      ['outer'],
    ],
    [
      'released instead: both',
      [
        ['sent', 'savepoint', 'attempt', 2, 'own'],
        ['commit', 'inner', 2],
        ['sent', 'release', 'attempt', 2, 'own'],
        ['ended', 1, 'released'],
        ['commit', 'outer', 1],
      ],
      ['inner', 'outer'],
    ],
    [
      'a commit before the savepoint: kept',
      [
        ['commit', 'before', 2],
        ['sent', 'savepoint', 'attempt', 2, 'own'],
        ['sent', 'rollback-to', 'attempt', 2, 'own'],
        ['commit', 'outer', 1],
      ],
      ['before', 'outer'],
    ],
    [
      // Its savepoint ended with the nested transaction it was set in: a later one of the
      // same name is another.
      'a savepoint ended with its transaction',
      [
        ['sent', 'savepoint', 'attempt', 3, 'own'],
        ['ended', 2, 'released'],
        ['commit', 'kept', 2],
        ['sent', 'rollback-to', 'attempt', 2, 'own'],
        ['commit', 'outer', 1],
      ],
      ['kept', 'outer'],
    ],
    [
      // TypeORM's nested transaction rolled back to by the name TypeORM gives it.
      "TypeORM's savepoint rolled back to by its name",
      [
        ['sent', 'savepoint', 'typeorm_1', 2, 'typeorm'],
        ['commit', 'deeper', 3],
        ['sent', 'rollback-to', 'typeorm_1', 2, 'own'],
        ['commit', 'outer', 1],
      ],
      ['outer'],
    ],
    [
      // TypeORM's rollback of try 1 keeps typeorm_1 (PostgreSQL does); try 2 sets it again
      // and releases it; a by-name ROLLBACK TO then reaches try 1's, undoing try 2.
      "TypeORM's savepoint left by its rollback, rolled back to by name (adversary 85)",
      [
        ['sent', 'savepoint', 'typeorm_1', 1, 'typeorm'],
        ['sent', 'rollback-to', 'typeorm_1', 1, 'typeorm'],
        ['ended', 1, 'rolled-back'],
        ['sent', 'savepoint', 'typeorm_1', 1, 'typeorm'],
        ['commit', 'try2', 2],
        ['sent', 'release', 'typeorm_1', 1, 'typeorm'],
        ['ended', 1, 'released'],
        ['sent', 'rollback-to', 'typeorm_1', 1, 'own'],
        ['commit', 'outer', 1],
      ],
      ['outer'],
    ],
  ])('%s', async (_name, steps, expected) => {
    const told: string[] = [];
    const runner = {
      data: undefined as unknown,
      broadcaster: {
        broadcast: () => {
          told.push((runner.data as { tag: string }).tag);
          return Promise.resolve();
        },
      },
    };
    const after = new AfterRequestCommit();
    for (const step of steps) {
      if (step[0] === 'commit') {
        runner.data = { tag: step[1] };
        after.note(runner as unknown as QueryRunner, step[2]);
      } else if (step[0] === 'sent') {
        after.savepointSent({ kind: step[1], name: step[2] }, step[3], step[4] === 'own');
      } else after.nestedEnded(step[1], step[2]);
    }
    const dataSource = { subscribers: [{ afterTransactionCommit: () => undefined }] };
    await after.tell(dataSource as unknown as DataSource, Infinity);
    expect(told).toEqual(expected);
  });
});
