import {
  checkDelivery,
  checkDuplicate,
  checkLeftRunning,
  type DeliveryRecord,
} from './delivery-check.js';
import { type Outcome } from './handler-program.js';

const ok: Extract<Outcome, { kind: 'ok' }> = {
  kind: 'ok',
  writes: ['0', '1'],
  forgets: [],
  mayForget: [],
  stream: false,
  refusable: false,
};
const applied: DeliveryRecord = {
  model: ok,
  published: 2,
  settlements: ['requeue', 'ack', 'ack'],
  applied: ['0', '1'],
  recorded: true,
  counted: 0,
};
const givenUp: DeliveryRecord = {
  model: { kind: 'error', status: 500 },
  published: 2,
  settlements: ['requeue', 'requeue', 'reject', 'reject'],
  applied: [],
  recorded: false,
  counted: 3,
};

describe('the check of a message id’s deliveries', () => {
  it.each<[string, DeliveryRecord, string[]]>([
    ['applied once, requeued on the way, the duplicate acknowledged', applied, []],
    ['a program that fails, given up with nothing kept', givenUp, []],
    [
      'a copy never settled',
      { ...applied, settlements: ['requeue', 'ack'] },
      ['1 of 2 copies settled (the broker heard: requeue,ack)'],
    ],
    [
      'acknowledged with an effect missing (its write lost, its id kept)',
      { ...applied, applied: ['0'] },
      ['acknowledged with effects [0], the model wants [0,1]'],
    ],
    [
      'acknowledged with an effect applied twice',
      { ...applied, applied: ['0', '1×2'] },
      ['acknowledged with effects [0,1×2], the model wants [0,1]'],
    ],
    [
      'acknowledged, its id not recorded (a redelivery would apply it again)',
      { ...applied, recorded: false },
      ['acknowledged, its id not recorded'],
    ],
    [
      'an outage counted against a message that succeeds',
      { ...applied, counted: 1 },
      ['1 failures counted against a message that succeeds'],
    ],
    [
      'a good message given up',
      { ...applied, settlements: ['requeue', 'reject', 'reject'], applied: [], recorded: false },
      ['given up (the broker heard: requeue,reject,reject)'],
    ],
    [
      'settled both ways',
      { ...applied, settlements: ['ack', 'reject'] },
      [
        'acknowledged and rejected (the broker heard: ack,reject)',
        'given up (the broker heard: ack,reject)',
      ],
    ],
    [
      'what the library may refuse, given up with nothing applied',
      {
        ...givenUp,
        model: { ...ok, refusable: true },
      },
      [],
    ],
    [
      'what the library may refuse, refused on one copy and done on the other',
      { ...applied, model: { ...ok, refusable: true }, settlements: ['reject', 'ack'], counted: 3 },
      [],
    ],
    [
      'what the library may refuse, given up with its effects applied',
      { ...givenUp, model: { ...ok, refusable: true }, applied: ['0'] },
      ['given up with effects [0] applied'],
    ],
    [
      'a failing program acknowledged with its effects',
      { ...givenUp, settlements: ['ack', 'ack'], applied: ['0'], recorded: true },
      [
        'acknowledged, the model wants it given up (error)',
        'effects [0] applied, the model wants none',
        'its id recorded, the model wants it given up',
      ],
    ],
    ['a swallowed failure (aborted) given up', { ...givenUp, model: { kind: 'aborted' } }, []],
  ])('%s', (_name, record, violations) => {
    expect(checkDelivery(record)).toEqual(violations);
  });
});

describe('the check of a duplicate delivered after its message was settled', () => {
  const first: DeliveryRecord = { ...applied, published: 1, settlements: ['requeue', 'ack'] };
  it.each<[string, DeliveryRecord, DeliveryRecord, string[]]>([
    ['acknowledged, nothing changed', first, applied, []],
    [
      'applied again',
      first,
      { ...applied, applied: ['0×2', '1×2'] },
      ['a duplicate changed its effects: [0,1], then [0×2,1×2]'],
    ],
    [
      // An ack that came with an effect missing, which the duplicate then applied.
      'applying what the first ack left missing',
      { ...first, applied: [], recorded: false },
      applied,
      ['a duplicate changed its effects: [], then [0,1]'],
    ],
    [
      'requeued',
      first,
      { ...applied, settlements: ['requeue', 'ack', 'requeue', 'ack'] },
      ['a duplicate was settled requeue,ack, not acknowledged'],
    ],
    ['a message given up: its duplicate may apply it', givenUp, applied, []],
  ])('%s', (_name, before, after, violations) => {
    expect(checkDuplicate(before, after)).toEqual(violations);
  });
});

describe('the check of the work a handler left running', () => {
  const leaves = { ...ok, forgets: ['0'], mayForget: ['2'] };
  const clean = { mayLose: false, acknowledged: true };
  it.each<[string, string[], { mayLose: boolean; acknowledged: boolean }, string[]]>([
    ['landed once', ['0'], clean, []],
    ['landed once, and the one a later savepoint may take', ['0', '2'], clean, []],
    ['lost', [], clean, ['work left running landed [], the model wants [0]']],
    ['lost with a drop', [], { mayLose: true, acknowledged: true }, []],
    ['lost with the message given up', [], { mayLose: false, acknowledged: false }, []],
    [
      'landed twice (a failed delivery’s write kept)',
      ['0×2'],
      { mayLose: true, acknowledged: false },
      ['work left running landed [0×2], the model wants [0]'],
    ],
  ])('%s', (_name, landed, how, violations) => {
    expect(checkLeftRunning(leaves, landed, how)).toEqual(violations);
  });
});
