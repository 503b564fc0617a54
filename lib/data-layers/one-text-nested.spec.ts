import { sqlReaderReady } from '../transaction/sql/sql-parse.js';
import { nestedTextPartsOf, runInParts } from './one-text-nested.js';

beforeAll(() => sqlReaderReady());

describe('nestedTextPartsOf', () => {
  it.each<[string, unknown, unknown, unknown]>([
    [
      'BEGIN and a setting',
      "BEGIN; SET LOCAL lock_timeout = '2s'",
      [],
      { begin: 'BEGIN', body: "SET LOCAL lock_timeout = '2s'" },
    ],
    [
      'a whole transaction',
      'BEGIN ISOLATION LEVEL SERIALIZABLE; INSERT INTO t VALUES (1); INSERT INTO t VALUES (2); COMMIT',
      undefined,
      {
        begin: 'BEGIN ISOLATION LEVEL SERIALIZABLE',
        body: 'INSERT INTO t VALUES (1);\nINSERT INTO t VALUES (2)',
        end: 'COMMIT',
      },
    ],
    [
      'a statement and its COMMIT',
      'UPDATE t SET a = 1; COMMIT',
      [],
      { body: 'UPDATE t SET a = 1', end: 'COMMIT' },
    ],
    ['BEGIN and COMMIT alone', 'BEGIN; COMMIT', [], { begin: 'BEGIN', end: 'COMMIT' }],
    ['one statement (read as a control)', 'BEGIN', [], undefined],
    ['no control at its ends', 'SELECT 1; COMMIT; SELECT 2', [], undefined],
    [
      'a chain at its end (not a nested end)',
      'BEGIN; SELECT 1; COMMIT AND CHAIN',
      [],
      { begin: 'BEGIN', body: 'SELECT 1;\nCOMMIT AND CHAIN' },
    ],
    ['with values', 'BEGIN; SELECT $1', [1], undefined],
    ['not a string', { text: 'BEGIN; SELECT 1' }, [], undefined],
    ['a keyword in a string only', "SELECT 'begin'; SELECT 2", [], undefined],
  ])('%s', (_name, text, values, expected) => {
    expect(nestedTextPartsOf(text, values)).toEqual(expected);
  });
});

describe('runInParts', () => {
  it('runs the BEGIN and the end as controls, the body as a statement, in order', async () => {
    const calls: string[] = [];
    const results = await runInParts(
      { begin: 'BEGIN', body: 'SELECT 1;\nSELECT 2', end: 'COMMIT' },
      (text, first) => {
        calls.push(`control ${text} ${first}`);
        return Promise.resolve({ command: text });
      },
      (text, first) => {
        calls.push(`body ${text} ${first}`);
        return Promise.resolve([{ command: 'SELECT' }, { command: 'SELECT' }]);
      },
    );
    expect(calls).toEqual([
      'control BEGIN true',
      'body SELECT 1;\nSELECT 2 false',
      'control COMMIT false',
    ]);
    expect(results).toEqual([
      { command: 'BEGIN' },
      { command: 'SELECT' },
      { command: 'SELECT' },
      { command: 'COMMIT' },
    ]);
  });
});
