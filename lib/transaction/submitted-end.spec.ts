import { endOf } from './submitted-end.js';

describe('endOf', () => {
  it.each([
    ['its ReadyForQuery', 'handleReadyForQuery'],
    ['its error', 'handleError'],
  ] as const)('settles at %s, and the submittable still hears it', async (_case, method) => {
    const heard: string[] = [];
    const submittable = {
      handleReadyForQuery: () => heard.push('handleReadyForQuery'),
      handleError: () => heard.push('handleError'),
    };
    const ended = endOf(submittable);
    submittable[method]();
    await ended;
    expect(heard).toEqual([method]);
  });

  it('settles at once for one node-postgres could not tell it ended', async () => {
    await expect(endOf({})).resolves.toBeUndefined();
  });
});
