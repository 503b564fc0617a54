import {
  dataToRestore,
  keptStepData,
  mayBeStale,
  readdedWithoutStepData,
  STEP_DATA,
  STEP_LOST,
  STEP_OWNER,
  stepDataKept,
  stepHold,
  stepJob,
} from './job-steps.js';

describe('stepHold', () => {
  it.each([
    ['no step before it', {}, undefined],
    ['the app’s own phases only', { psp_paid: { id: 'tr_1' } }, undefined],
    ['its own job’s step', { [STEP_OWNER]: '7@100' }, undefined],
    ['another job’s step: it waits for that job', { [STEP_OWNER]: '8@200' }, { kind: 'held' }],
    [
      'a step that did not commit: fails for good, saying why',
      { [STEP_OWNER]: '7@100', [STEP_LOST]: 'deferred foreign key' },
      { kind: 'lost', why: 'deferred foreign key' },
    ],
  ] as const)('%s', (_name, results, hold) => {
    expect(stepHold(results, '7@100')).toEqual(hold);
  });
});

describe('dataToRestore', () => {
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value), 'utf8').toString('base64');
  const kept = (data: unknown, over: unknown, more: object = {}) => ({
    data: b64(data),
    over: b64(over),
    added: 100,
    ...more,
  });
  const json = (value: unknown) => JSON.stringify(value);
  const owned = (stepData: object) => ({ [STEP_OWNER]: '7@100', [STEP_DATA]: stepData });
  it.each([
    ['no step data kept', { [STEP_OWNER]: '7@100' }, 100, { step: 1 }, undefined],
    [
      'BullMQ still has the data before its step (its worker died before the write): given back',
      owned(kept({ step: 2 }, { step: 1 })),
      100,
      { step: 1 },
      { data: { step: 2 } },
    ],
    [
      'BullMQ has the step’s data',
      owned(kept({ step: 2 }, { step: 1 })),
      100,
      { step: 2 },
      undefined,
    ],
    [
      'BullMQ has newer data (the job’s own after its move, an operator’s fix): never over it',
      owned(kept({ step: 2 }, { step: 1 })),
      100,
      { step: 3 },
      undefined,
    ],
    [
      'the write was noted, and the operator rewound the job to the step before: it stands',
      owned(kept({ step: 2 }, { step: 1 }, { written: true })),
      100,
      { step: 1 },
      undefined,
    ],
    [
      'the job added again under its own id: it goes on from the step its key reached',
      {
        [STEP_OWNER]: 'id:order-7',
        [STEP_DATA]: kept({ step: 2 }, { step: 1 }, { written: true }),
      },
      200,
      { step: 1 },
      { data: { step: 2 } },
    ],
    [
      'another job’s step data (a key of the app’s): never',
      { [STEP_OWNER]: '8@200', [STEP_DATA]: kept({ step: 2 }, { step: 1 }) },
      100,
      { step: 1 },
      undefined,
    ],
    [
      'no owner (released): never',
      { [STEP_DATA]: kept({ step: 2 }, { step: 1 }) },
      100,
      { step: 1 },
      undefined,
    ],
    [
      'data jsonb refuses (a NUL, a lone surrogate), kept as BullMQ keeps it',
      owned(kept({ note: 'a\u0000b\ud83c' }, { step: 1 })),
      100,
      { step: 1 },
      { data: { note: 'a\u0000b\ud83c' } },
    ],
  ] as const)('%s', (_name, results, added, data, restored) => {
    const owner =
      (results as Record<string, unknown>)[STEP_OWNER] === 'id:order-7' ? 'id:order-7' : '7@100';
    expect(dataToRestore(results, owner, added, json(data))).toEqual(restored);
  });
});

describe('mayBeStale', () => {
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value), 'utf8').toString('base64');
  const owned = (more: object) => ({
    [STEP_OWNER]: '7@100',
    [STEP_DATA]: { data: b64({ step: 2 }), over: b64({ step: 1 }), added: 100, ...more },
  });
  const json = (value: unknown) => JSON.stringify(value);
  it.each<[string, Record<string, unknown>, string, boolean]>([
    [
      'the step written, the run given the data of before it: read afresh',
      owned({ written: true }),
      json({ step: 1 }),
      true,
    ],
    [
      'the step written, the run given its data',
      owned({ written: true }),
      json({ step: 2 }),
      false,
    ],
    ['not written yet: dataToRestore gives it back', owned({}), json({ step: 1 }), false],
    ['other data (an operator’s)', owned({ written: true }), json({ step: 9 }), false],
    [
      'another job added under the id',
      owned({ written: true, added: 50 }),
      json({ step: 1 }),
      false,
    ],
    ['no step data', { [STEP_OWNER]: '7@100' }, json({ step: 1 }), false],
  ])('%s', (_name, results, current, expected) => {
    expect(mayBeStale(results, '7@100', 100, current)).toBe(expected);
  });
});

describe('keptStepData', () => {
  it.each([
    [
      'a step with data: its JSON and the JSON before it, in base64',
      { data: { step: 2 }, over: '{"step":1}' },
      { data: 'eyJzdGVwIjoyfQ==', over: 'eyJzdGVwIjoxfQ==', added: 100 },
    ],
    [
      'a step without new data (a poll): when the job was added, and that it saved nothing',
      undefined,
      { added: 100, polled: true },
    ],
  ] as const)('%s', (_name, held, kept) => {
    expect(keptStepData(held, 100)).toEqual(kept);
  });
});

describe('stepDataKept', () => {
  it.each([
    ['no step data (an older version’s step)', {}, 'none'],
    ['a step’s data', { [STEP_DATA]: { data: 'e30=', over: 'e30=', added: 100 } }, 'data'],
    [
      'a step’s data, polls after it (they keep it)',
      { [STEP_DATA]: { data: 'e30=', over: 'e30=', added: 100, version: 3 } },
      'data',
    ],
    [
      'polls only: nothing saved, nothing missing (adversary 75)',
      { [STEP_DATA]: { added: 100, polled: true, version: 1 } },
      'polls',
    ],
    [
      'forgotten: the job saved its next step after it moved',
      { [STEP_DATA]: { added: 100 } },
      'none',
    ],
  ] as const)('%s', (_name, results, kept) => {
    expect(stepDataKept(results)).toBe(kept);
  });
});

describe('readdedWithoutStepData', () => {
  const own = 'id:pay-1';
  it.each([
    ['no step before it', {}, 200, false],
    [
      'its own step, no data: the same job',
      { [STEP_OWNER]: own, [STEP_DATA]: { added: 200 } },
      200,
      false,
    ],
    [
      'its id added again, its step data forgotten: refused (adversary 74)',
      { [STEP_OWNER]: own, [STEP_DATA]: { added: 100 } },
      200,
      true,
    ],
    [
      'its id added again after polls only: goes on from its own data (adversary 75)',
      { [STEP_OWNER]: own, [STEP_DATA]: { added: 100, polled: true } },
      200,
      false,
    ],
    [
      'its id added again, the step’s data kept: goes on from it',
      { [STEP_OWNER]: own, [STEP_DATA]: { data: 'e30=', over: 'e30=', added: 100 } },
      200,
      false,
    ],
    ['no time kept (an older version’s step): goes on', { [STEP_OWNER]: own }, 200, false],
    [
      'another owner’s step (see stepHold)',
      { [STEP_OWNER]: '7@100', [STEP_DATA]: { added: 100 } },
      200,
      false,
    ],
  ] as const)('%s', (_name, results, added, refused) => {
    expect(readdedWithoutStepData(results, own, added)).toBe(refused);
  });
});

describe('stepJob', () => {
  /** A job as BullMQ's: its methods on its prototype, each call recorded. */
  class FakeJob {
    data: unknown = { step: 1 };
    calls: string[] = [];
    children = true;
    updateData(data: unknown) {
      this.calls.push(`updateData ${JSON.stringify(data)}`);
      this.data = data;
      return Promise.resolve();
    }
    progress: unknown = 0;
    updateProgress(progress: unknown) {
      this.calls.push(`updateProgress ${JSON.stringify(progress)}`);
      this.progress = progress;
      return Promise.resolve();
    }
    moveToDelayed() {
      this.calls.push('moveToDelayed');
      return Promise.resolve();
    }
    moveToWaitingChildren() {
      this.calls.push(`moveToWaitingChildren ${this.children}`);
      return Promise.resolve(this.children);
    }
  }
  const stepped = (job: FakeJob, pending = true) => {
    const commits: unknown[] = [];
    const moved: Promise<void>[] = [];
    const state = { pending };
    const run = stepJob(
      job,
      (held) => {
        commits.push(held);
        job.calls.push('commit');
        state.pending = false;
        return Promise.resolve();
      },
      () => state.pending,
      (step) => moved.push(step),
      () => Promise.resolve(),
      () => {
        job.calls.push('forget step data');
        return Promise.resolve();
      },
    );
    return { run, commits, moved };
  };

  it('holds updateData while the work is uncommitted; moveToDelayed commits it first', async () => {
    const job = new FakeJob();
    const { commits } = stepped(job);
    await job.updateData({ step: 2 });
    expect(job.data).toEqual({ step: 2 });
    await job.moveToDelayed();
    expect(commits).toEqual([{ data: { step: 2 }, over: '{"step":1}' }]);
    expect(job.calls).toEqual(['commit', 'updateData {"step":2}', 'moveToDelayed']);
  });

  it('moveToWaitingChildren that moves: the step commits after, with its held data', async () => {
    const job = new FakeJob();
    const { commits, moved } = stepped(job);
    await job.updateData({ step: 2 });
    expect(await job.moveToWaitingChildren()).toBe(true);
    expect(moved).toHaveLength(1);
    expect(commits).toEqual([{ data: { step: 2 }, over: '{"step":1}' }]);
    expect(job.calls).toEqual(['moveToWaitingChildren true', 'commit', 'updateData {"step":2}']);
  });

  it('moveToWaitingChildren with no child pending: nothing commits, the job goes on', async () => {
    const job = new FakeJob();
    job.children = false;
    const { commits, moved } = stepped(job);
    await job.updateData({ step: 2 });
    expect(await job.moveToWaitingChildren()).toBe(false);
    expect(commits).toEqual([]);
    expect(moved).toEqual([]);
    expect(job.calls).toEqual(['moveToWaitingChildren false']);
  });

  it('writes updateData at once where no work is pending', async () => {
    const job = new FakeJob();
    stepped(job, false);
    await job.updateData({ step: 3 });
    expect(job.calls).toEqual(['updateData {"step":3}']);
  });

  it('holds updateProgress while the work is uncommitted, its last value written with the step', async () => {
    const job = new FakeJob();
    stepped(job);
    await job.updateProgress(50);
    await job.updateProgress(60);
    expect(job.progress).toBe(60);
    expect(job.calls).toEqual([]);
    await job.moveToDelayed();
    expect(job.calls).toEqual(['commit', 'updateProgress 60', 'moveToDelayed']);
  });

  it('a rolled-back run never writes its held progress', async () => {
    const job = new FakeJob();
    const { run } = stepped(job);
    await job.updateProgress(50);
    run.release();
    expect(job.calls).toEqual([]);
  });

  it('a rolled-back run gives the job object back BullMQ’s data and progress (adversary 75)', async () => {
    const job = new FakeJob();
    const before = job.data;
    const { run } = stepped(job);
    await job.updateData({ step: 2 });
    await job.updateProgress(50);
    expect(job.data).toEqual({ step: 2 });
    run.release();
    expect(job.data).toEqual(before);
    expect(job.progress).toBe(0);
    expect(job.calls).toEqual([]);
  });

  it('gives BullMQ’s data back though the job changed that object in place (adversary 75b)', async () => {
    const job = new FakeJob();
    job.progress = { done: 1 };
    const { run } = stepped(job);
    const data = job.data as { step: number };
    const progress = job.progress as { done: number };
    data.step = 2;
    progress.done = 2;
    await job.updateData(data);
    await job.updateProgress(progress);
    run.release();
    expect(job.data).toEqual({ step: 1 });
    expect(job.progress).toEqual({ done: 1 });
    expect(job.calls).toEqual([]);
  });

  it('a committed step’s data and progress stay on the job object', async () => {
    const job = new FakeJob();
    const { run } = stepped(job);
    await job.updateData({ step: 2 });
    await job.updateProgress(50);
    await job.moveToDelayed();
    run.release();
    expect(job.data).toEqual({ step: 2 });
    expect(job.progress).toBe(50);
  });

  it('updateData after the step moved (BullMQ’s docs’ order) tells the key first, once', async () => {
    const job = new FakeJob();
    stepped(job);
    await job.moveToDelayed();
    await job.updateData({ step: 2 });
    await job.updateData({ step: 3 });
    expect(job.calls).toEqual([
      'commit',
      'moveToDelayed',
      'forget step data',
      'updateData {"step":2}',
      'updateData {"step":3}',
    ]);
  });

  it('gives the job its own methods back', async () => {
    const job = new FakeJob();
    const { run, commits } = stepped(job);
    run.release();
    expect(Object.getOwnPropertyNames(job)).not.toContain('updateData');
    await job.updateData({ step: 4 });
    await job.moveToDelayed();
    expect(commits).toEqual([]);
  });
});
