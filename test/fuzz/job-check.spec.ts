import { checkJobAgain, checkJobs, type JobRecord, type JobSeen } from './job-check.js';
import { type Outcome } from './handler-program.js';

const ok: Outcome = {
  kind: 'ok',
  writes: ['0', '1'],
  forgets: [],
  mayForget: [],
  stream: false,
  refusable: false,
};
const refusableOk: Outcome = { ...ok, refusable: true };
const error: Outcome = { kind: 'error', status: 500, durable: ['0.0'] };
const done = (id: string, run = 'r1'): JobSeen => ({ id, state: 'completed', result: { run } });
const failed = (id: string): JobSeen => ({ id, state: 'failed', failedReason: 'boom' });

describe('checkJobs', () => {
  it.each<[string, JobRecord, string[]]>([
    ['completed once, its effects once', { model: ok, jobs: [done('a')], applied: ['0', '1'] }, []],
    [
      'a copy completed with the first run',
      { model: ok, jobs: [done('a'), done('a+r1')], applied: ['0', '1'] },
      [],
    ],
    [
      'a copy completed with a run of its own: a second run',
      { model: ok, jobs: [done('a'), done('a+r1', 'r2')], applied: ['0', '1'] },
      ["completed with 2 runs' results: a completed; a+r1 completed"],
    ],
    [
      'effects twice',
      { model: ok, jobs: [done('a')], applied: ['0×2', '1×2'] },
      ['completed with effects [0×2,1×2], the model wants [0,1]'],
    ],
    [
      'left waiting',
      { model: ok, jobs: [done('a'), { id: 'a+r1', state: 'delayed' }], applied: ['0', '1'] },
      ['1 of 2 jobs settled: a completed; a+r1 delayed'],
    ],
    [
      'a program that succeeds, failed',
      { model: ok, jobs: [failed('a')], applied: [] },
      ['failed: a failed (boom)'],
    ],
    [
      'what the library may refuse, failed with nothing applied',
      { model: refusableOk, jobs: [failed('a')], applied: [] },
      [],
    ],
    [
      'refused, with effects applied',
      { model: refusableOk, jobs: [failed('a')], applied: ['0'] },
      ['failed with effects [0], the model wants []'],
    ],
    [
      'a failing program failed, its phase kept once',
      { model: error, jobs: [failed('a')], applied: ['0.0'] },
      [],
    ],
    [
      'its phase run again by a later attempt',
      { model: error, jobs: [failed('a')], applied: ['0.0×2'] },
      ['effects [0.0×2] applied, the model wants [0.0]'],
    ],
    [
      'a failing program completed',
      { model: error, jobs: [done('a')], applied: ['0.0'] },
      ['completed, the model wants it failed (error): a completed'],
    ],
  ])('%s', (_name, record, violations) => {
    expect(checkJobs(record)).toEqual(violations);
  });
});

describe('checkJobAgain', () => {
  const before: JobRecord = { model: ok, jobs: [done('a')], applied: ['0', '1'] };
  it.each<[string, JobRecord, JobRecord, string[]]>([
    ['completed with the first run', before, { ...before, jobs: [done('a'), done('a+again')] }, []],
    [
      'run again',
      before,
      { model: ok, jobs: [done('a'), done('a+again', 'r2')], applied: ['0×2', '1×2'] },
      [
        'a later job changed its effects: [0,1], then [0×2,1×2]',
        'a later job was completed with run r2, not completed with the first run (r1)',
      ],
    ],
    [
      'a refusal, then run through',
      { model: refusableOk, jobs: [failed('a')], applied: [] },
      { model: refusableOk, jobs: [failed('a'), done('a+again')], applied: ['0', '1'] },
      [],
    ],
    [
      'a failure, its phase run again by a later job',
      { model: error, jobs: [failed('a')], applied: ['0.0'] },
      { model: error, jobs: [failed('a'), failed('a+again')], applied: ['0.0×2'] },
      ['a later job changed its effects: [0.0], then [0.0×2]'],
    ],
  ])('%s', (_name, first, after, violations) => {
    expect(checkJobAgain(first, after)).toEqual(violations);
  });
});
