import { type PoolClient, type QueryResult } from 'pg';
import { DatabaseDeadlineError, queryWithDeadline, withDeadline } from './deadline.js';

const after = <T>(ms: number, value: T, fail = false) =>
  new Promise<T>((resolve, reject) =>
    setTimeout(() => (fail ? reject(value) : resolve(value)), ms),
  );

describe('withDeadline', () => {
  it.each<[string, () => Promise<string>, string]>([
    ['a value before the deadline is the answer', () => after(1, 'value'), 'value'],
    ['an error before the deadline is the answer', () => after(1, 'boom', true), 'error boom'],
    ['a value after the deadline: the deadline', () => after(80, 'value'), 'deadline'],
    ['an error after the deadline: the deadline', () => after(80, 'boom', true), 'deadline'],
    ['nothing ever: the deadline', () => new Promise<string>(() => undefined), 'deadline'],
  ])('%s', async (_name, work, expected) => {
    const outcome = await withDeadline(work(), 30, 'the statement').then(
      (value) => value,
      (error: unknown) =>
        error instanceof DatabaseDeadlineError ? 'deadline' : `error ${String(error)}`,
    );
    expect(outcome).toBe(expected);
  });

  it('tells onLate first, and answers the deadline once onLate is done, even if it fails', async () => {
    const told: string[] = [];
    const late = withDeadline(
      new Promise<never>(() => undefined),
      10,
      'the statement',
      async () => {
        await after(30, undefined);
        told.push('onLate done');
        throw new Error('onLate failed');
      },
    ).catch((error: unknown) => {
      told.push(error instanceof DatabaseDeadlineError ? 'deadline' : 'other');
    });
    await late;
    expect(told).toEqual(['onLate done', 'deadline']);
  });

  it('does not tell onLate when the answer comes in time', async () => {
    let told = false;
    await withDeadline(after(1, 'v'), 30, 'x', () => {
      told = true;
    });
    await after(60, undefined);
    expect(told).toBe(false);
  });
});

describe('queryWithDeadline past its deadline', () => {
  /**
   * A connection whose statement answers (or fails) after `ms`, or never. It announced no
   * process id, so no cancel request is sent: the statement ends on its own, as one that
   * committed while its cancel was on its way.
   */
  const connection = (ms: number | undefined, fail = false) =>
    ({
      query: () =>
        ms === undefined
          ? new Promise<never>(() => undefined)
          : after(
              ms,
              fail ? new Error('57014 cancelled') : ({ rows: [{ n: 1 }] } as QueryResult),
              fail,
            ),
    }) as unknown as PoolClient;

  /** What the caller heard, after how long; what `late` was given. */
  async function run(ms: number | undefined, fail = false) {
    const late: unknown[] = [];
    const started = Date.now();
    const heard = await queryWithDeadline(connection(ms, fail), { text: 'SELECT 1' }, 20, {
      late: (result) => late.push(result.rows),
    }).then(
      () => 'answer',
      (error: unknown) => (error instanceof DatabaseDeadlineError ? 'deadline' : 'error'),
    );
    return { heard, afterMs: Date.now() - started, late };
  }

  it.each<[string, number | undefined, boolean, string, unknown[]]>([
    ['an answer in time is the answer, late told nothing', 1, false, 'answer', []],
    [
      'an answer after the deadline goes to late; the caller hears the deadline',
      60,
      false,
      'deadline',
      [[{ n: 1 }]],
    ],
    ['an error after the deadline (the cancel took): late told nothing', 60, true, 'deadline', []],
  ])('%s', async (_name, ms, fail, heard, late) => {
    const outcome = await run(ms, fail);
    expect(outcome.heard).toBe(heard);
    expect(outcome.late).toEqual(late);
  });

  it('answers the deadline once the statement has ended, so that its answer is read', async () => {
    // The connection is dropped when the caller hears of the deadline: an answer still on its
    // way then would be lost, and the key it claimed held by nobody.
    const { heard, afterMs, late } = await run(150);
    expect(heard).toBe('deadline');
    expect(afterMs).toBeGreaterThanOrEqual(140);
    expect(late).toHaveLength(1);
  });

  it('answers the deadline within a bound when the statement never ends', async () => {
    const { heard, afterMs, late } = await run(undefined);
    expect(heard).toBe('deadline');
    expect(afterMs).toBeLessThan(20 + 1_000 + 500);
    expect(late).toEqual([]);
  });
});
