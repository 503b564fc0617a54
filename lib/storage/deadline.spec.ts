import { DatabaseDeadlineError, withDeadline } from './deadline.js';

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
