import { decodeJobResult, encodeJobResult, isJobResult } from './job-answer.js';

describe('a job’s kept result', () => {
  it.each([
    ['an object', { paid: 500, by: 'a' }, { paid: 500, by: 'a' }],
    ['nothing (undefined)', undefined, undefined],
    ['null', null, null],
    ['a number', 7, 7],
    ['a Date: its JSON, as BullMQ keeps it', new Date(0), '1970-01-01T00:00:00.000Z'],
  ] as const)('%s comes back as BullMQ’s JSON of it', (_name, result, back) => {
    const stored = encodeJobResult(result);
    expect(isJobResult(stored)).toBe(true);
    expect(decodeJobResult(stored)).toEqual(back);
  });

  it.each([
    ['a BigInt', { cents: 1n }],
    [
      'a cycle',
      (() => {
        const node: Record<string, unknown> = {};
        node.self = node;
        return node;
      })(),
    ],
  ])('%s cannot be kept: said before anything commits', (_name, result) => {
    expect(() => encodeJobResult(result)).toThrow(TypeError);
  });
});
