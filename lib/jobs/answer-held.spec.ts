import { ANSWER_HELD, answerHeldHeader, answerHeldToWrite } from './answer-held.js';
import { encodeJobResult } from './job-answer.js';

const ADDED = 1_700_000_000_000;
const JOB = { id: '7', added: ADDED };
const before = JSON.stringify({ orderId: 'o-1' });
const after = { orderId: 'o-1', status: 'paid' };

/** A kept answer whose run held `after` over `before`, and progress 100 over 0. */
function keptAnswer() {
  const answer = encodeJobResult({ paid: true });
  answer.headers[ANSWER_HELD] = answerHeldHeader(
    { data: after, over: before },
    { value: 100, over: '0' },
    JOB,
  )!;
  return answer;
}

describe('what a job’s kept answer keeps of what its run held', () => {
  it('keeps nothing where the run held nothing', () => {
    expect(answerHeldHeader(undefined, undefined, JOB)).toBeUndefined();
  });

  it.each([
    [
      'the same job, BullMQ still with the data and progress of before: both written',
      JOB,
      before,
      '0',
      { data: { data: after }, progress: { value: 100 } },
    ],
    [
      'the same job, BullMQ with the data already (its write did happen): progress only',
      JOB,
      JSON.stringify(after),
      '0',
      { progress: { value: 100 } },
    ],
    ['both written already: nothing', JOB, JSON.stringify(after), '100', undefined],
    [
      'data written since by an operator (a fix): it stands',
      JOB,
      JSON.stringify({ orderId: 'o-2' }),
      '100',
      undefined,
    ],
    [
      'another job added again under its id: its data is its own',
      { id: '7', added: ADDED + 1 },
      before,
      '0',
      undefined,
    ],
    [
      'a twin of its key added in the same millisecond (addBulk): its data is its own',
      { id: '8', added: ADDED },
      before,
      '0',
      undefined,
    ],
    [
      'a job without an id (not BullMQ’s): not the one kept',
      { added: ADDED },
      before,
      '0',
      undefined,
    ],
  ] as const)('%s', (_name, job, data, progress, write) => {
    expect(answerHeldToWrite(keptAnswer(), job, data, progress)).toEqual(write);
  });

  it.each([
    ['an answer of an earlier version (no header)', encodeJobResult({ paid: true })],
    [
      'a header that is not the library’s JSON',
      { ...encodeJobResult(1), headers: { [ANSWER_HELD]: 'not json' } },
    ],
    ['a header of null', { ...encodeJobResult(1), headers: { [ANSWER_HELD]: 'null' } }],
    [
      'a header of an earlier version, the time alone (no id)',
      {
        ...encodeJobResult(1),
        headers: {
          [ANSWER_HELD]: JSON.stringify({
            added: ADDED,
            data: Buffer.from(JSON.stringify(after)).toString('base64'),
            over: Buffer.from(before).toString('base64'),
          }),
        },
      },
    ],
  ])('%s: nothing written', (_name, stored) => {
    expect(answerHeldToWrite(stored, JOB, before, '0')).toBeUndefined();
  });

  it('keeps data jsonb would refuse (a NUL, a lone surrogate) as BullMQ keeps it', () => {
    const odd = { note: 'a\u0000b\ud800' };
    const answer = encodeJobResult(null);
    answer.headers[ANSWER_HELD] = answerHeldHeader({ data: odd, over: before }, undefined, JOB)!;
    expect(answer.headers[ANSWER_HELD]).not.toMatch(/\\u0000/);
    expect(answerHeldToWrite(answer, JOB, before, '0')).toEqual({ data: { data: odd } });
  });
});
