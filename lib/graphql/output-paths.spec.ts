import { ForbiddenException } from '@nestjs/common';
import {
  type AnswerPath,
  completedInOperation,
  dataAt,
  keySteps,
  noteCompleting,
  noteFirstResult,
  noteMember,
  noteMiddlewarePath,
  noteReplayedOutputs,
  nullingError,
  nullingPath,
  nulledKeyFor,
  toldOf,
  nulledAncestor,
  outputAt,
  outputsIndex,
  storedKeyFor,
  outputsIn,
  type AnsweredError,
  insideFirstOutput,
  noteAppParent,
  pendingBoundMs,
  pendingWaitMs,
  type ReplayedOutputs,
  relativeKey,
  replayedOutputAt,
  storeOutputsOf,
  awaitOutputs,
  type StoredOutputs,
} from './output-paths.js';
import { decodeAnswer, encodeAnswer, type FieldError } from './field-answer.js';

describe('relativeKey', () => {
  it.each<{ root: AnswerPath; path: AnswerPath; strict?: boolean; expected: string | undefined }>([
    { root: ['joinTeam'], path: ['joinTeam', 'members'], expected: 'members' },
    { root: ['a'], path: ['a', 'items', 0, 'tags'], expected: 'items.0.tags' },
    { root: ['joinTeam'], path: ['joinTeam'], expected: undefined },
    { root: ['joinTeam'], path: ['joinTeam'], strict: false, expected: '' },
    { root: ['joinTeam'], path: ['other', 'members'], expected: undefined },
    { root: ['a', 'b'], path: ['a'], expected: undefined },
    // An alias is its own root: `b: joinTeam` is not under `joinTeam`.
    { root: ['b'], path: ['joinTeam', 'members'], expected: undefined },
  ])('$path under $root (strict $strict): $expected', ({ root, path, strict, expected }) => {
    expect(relativeKey(root, path, strict)).toBe(expected);
  });
});

describe('dataAt', () => {
  const data = { t: { members: [{ name: 'Ada' }, null], id: 1 } };
  it.each<{ path: AnswerPath; expected: unknown }>([
    { path: ['t', 'id'], expected: 1 },
    { path: ['t', 'members', 0, 'name'], expected: 'Ada' },
    { path: ['t', 'members', 1], expected: null },
    { path: ['t', 'members', 1, 'name'], expected: undefined },
    { path: ['x', 'y'], expected: undefined },
  ])('$path: $expected', ({ path, expected }) => {
    expect(dataAt(data, path)).toEqual(expected);
  });
});

describe('outputsIn', () => {
  const data = { s: { items: [{ title: 'A' }, { title: 'B', minutes: 3 }], tags: ['x'] } };
  it.each<{
    name: string;
    paths: AnswerPath[];
    members: Record<string, string>;
    expected: StoredOutputs;
  }>([
    {
      name: 'each output by its key, the members under them',
      paths: [['s', 'items']],
      members: { 'items.0': 'Book', 'items.1': 'Movie', 'other.0': 'Book' },
      expected: {
        outputs: { items: data.s.items },
        members: { 'items.0': 'Book', 'items.1': 'Movie' },
      },
    },
    {
      name: 'a path the answer has no value at is left out',
      paths: [
        ['s', 'tags'],
        ['s', 'gone', 'deeper'],
      ],
      members: {},
      expected: { outputs: { tags: ['x'] } },
    },
    {
      name: 'a field the answer does not hold is left out',
      paths: [['s', 'none']],
      members: {},
      expected: { outputs: {} },
    },
  ])('$name', ({ paths, members, expected }) => {
    expect(outputsIn(data, ['s'], paths, members)).toEqual(expected);
  });

  const failedData = { s: { lines: null, tags: ['x'], other: null } };
  it.each<{ name: string; errors: AnsweredError[]; expected: StoredOutputs }>([
    {
      name: "a middleware field's own error is kept beside its null output",
      errors: [{ message: 'bad line B', path: ['s', 'lines'], extensions: { code: 'BAD' } }],
      expected: {
        outputs: { lines: null, tags: ['x'] },
        errors: { lines: { message: 'bad line B', extensions: { code: 'BAD' } } },
      },
    },
    {
      name: 'empty extensions are left out',
      errors: [{ message: 'bad', path: ['s', 'lines'], extensions: {} }],
      expected: { outputs: { lines: null, tags: ['x'] }, errors: { lines: { message: 'bad' } } },
    },
    {
      name: 'an error of a field with no middleware, or under a non-null output, is not kept',
      errors: [
        { message: 'other', path: ['s', 'other'] },
        { message: 'under', path: ['s', 'tags'] },
        { message: 'elsewhere', path: ['t', 'lines'] },
        { message: 'unlocated' },
      ],
      expected: { outputs: { lines: null, tags: ['x'] } },
    },
    {
      name: 'an error under a null output (an item of a non-null list type), with its locations',
      errors: [
        {
          message: 'Cannot return null for non-nullable field Order.lines.',
          path: ['s', 'lines', 1],
          locations: [{ line: 1, column: 20 }],
        },
      ],
      expected: {
        outputs: { lines: null, tags: ['x'] },
        errors: {
          'lines.1': {
            message: 'Cannot return null for non-nullable field Order.lines.',
            locations: [{ line: 1, column: 20 }],
          },
        },
      },
    },
    {
      name: 'what was thrown is kept as a resolver error is (an HttpException by its status)',
      errors: [
        {
          message: 'staff only',
          path: ['s', 'lines'],
          extensions: {},
          originalError: new ForbiddenException('staff only'),
        },
      ],
      expected: {
        outputs: { lines: null, tags: ['x'] },
        errors: {
          lines: {
            message: 'staff only',
            thrown: expect.objectContaining({
              kind: 'http',
              name: 'ForbiddenException',
              http: {
                status: 403,
                response: { message: 'staff only', error: 'Forbidden', statusCode: 403 },
              },
            }) as FieldError,
          },
        },
      },
    },
    {
      name: 'the first error of a field is kept',
      errors: [
        { message: 'first', path: ['s', 'lines'] },
        { message: 'second', path: ['s', 'lines'] },
      ],
      expected: { outputs: { lines: null, tags: ['x'] }, errors: { lines: { message: 'first' } } },
    },
  ])('$name', ({ errors, expected }) => {
    const paths: AnswerPath[] = [
      ['s', 'lines'],
      ['s', 'tags'],
    ];
    expect(outputsIn(failedData, ['s'], paths, {}, errors)).toEqual(expected);
  });
});

describe('outputsIn, a parent the answer nulled', () => {
  const paths: AnswerPath[] = [
    ['s', 'note'],
    ['s', 'tags'],
  ];
  it.each<{ name: string; errors: AnsweredError[]; expected: StoredOutputs }>([
    {
      name: 'by the error of a middleware field (non-null): null with that error',
      errors: [{ message: 'null note', path: ['s', 'note'] }],
      expected: {
        outputs: { note: null },
        errors: { note: { message: 'null note' } },
        nulled: { tags: 'note' },
      },
    },
    {
      name: 'by an error under it: null with that error',
      errors: [{ message: 'null item', path: ['s', 'note', 2] }],
      expected: {
        outputs: { note: null },
        errors: { 'note.2': { message: 'null item' } },
        nulled: { tags: 'note.2' },
      },
    },
    {
      // Answered that error again at its place on a replay, never `field_not_stored`.
      name: 'by another field: each middleware field nulled by that error',
      errors: [{ message: 'other', path: ['s', 'id'] }],
      expected: {
        outputs: {},
        errors: { id: { message: 'other' } },
        nulled: { note: 'id', tags: 'id' },
      },
    },
  ])('$name', ({ errors, expected }) => {
    expect(outputsIn({ s: null }, ['s'], paths, {}, errors)).toEqual(expected);
  });
});

describe('outputsIn, the whole data nulled above the mutation (adversary 83)', () => {
  const paths: AnswerPath[] = [
    ['s', 'note'],
    ['s', 'tags'],
  ];
  // Another root field's error (not under the mutation), `data` null.
  const errors: AnsweredError[] = [{ message: 'mail down', path: ['notify'] }];
  it.each<{ name: string; remade: Record<string, unknown>; expected: StoredOutputs }>([
    {
      name: 'each output made again: stored',
      remade: { note: 'N', tags: ['a'] },
      expected: { outputs: { note: 'N', tags: ['a'] } },
    },
    {
      // A replay answers `field_output_pending` there, never `field_not_stored`.
      name: 'one that could not be made: noted as lost',
      remade: { note: 'N' },
      expected: { outputs: { note: 'N' }, lost: ['tags'] },
    },
  ])('$name', ({ remade, expected }) => {
    expect(outputsIn(null, ['s'], paths, {}, errors, {}, remade)).toEqual(expected);
  });

  it('a lost output answers pending on a replay, by its key and by its named key', () => {
    const replay: ReplayedOutputs = {
      root: ['s'],
      kind: 'stored',
      outputs: { outputs: { note: 'N' }, names: { tags: 'tags' }, lost: ['tags'] },
    };
    expect(outputAt([replay], ['s', 'tags'])).toEqual({ kind: 'pending' });
    expect(outputAt([replay], ['s', 't'], () => ['s', 'tags'])).toEqual({ kind: 'pending' });
    expect(outputAt([replay], ['s', 'other'])).toEqual({ kind: 'unstored' });
  });
});

describe('keySteps', () => {
  it.each<{ key: string; expected: (string | number)[] }>([
    { key: '', expected: [] },
    { key: 'tags', expected: ['tags'] },
    { key: 'items.10.tags.0', expected: ['items', 10, 'tags', 0] },
  ])('$key: $expected', ({ key, expected }) => {
    expect(keySteps(key)).toEqual(expected);
  });
});

describe('outputAt', () => {
  const stored: ReplayedOutputs = {
    root: ['t'],
    kind: 'stored',
    outputs: {
      outputs: { members: [{ name: 'Ada' }], lines: null },
      members: { 'members.0': 'Member' },
      errors: { 'lines.1': { message: 'null item' }, 'members.0': { message: 'elsewhere' } },
    },
  };
  const pending: ReplayedOutputs = { root: ['u'], kind: 'pending' };
  it.each<{ path: AnswerPath; expected: unknown }>([
    {
      path: ['t', 'members'],
      expected: {
        kind: 'stored',
        wire: [{ name: 'Ada' }],
        key: 'members',
        members: { 'members.0': 'Member' },
        errors: { 'members.0': { message: 'elsewhere' } },
      },
    },
    {
      path: ['t', 'lines'],
      expected: {
        kind: 'stored',
        wire: null,
        key: 'lines',
        members: { 'members.0': 'Member' },
        errors: { 'lines.1': { message: 'null item' } },
      },
    },
    { path: ['t', 'others'], expected: { kind: 'unstored' } },
    { path: ['u', 'members'], expected: { kind: 'pending' } },
    // Not under a replayed mutation: the middleware runs.
    { path: ['v', 'members'], expected: undefined },
  ])('$path: $expected', ({ path, expected }) => {
    expect(outputAt([stored, pending], path)).toEqual(expected);
  });
});

describe('outputAt, under a field the app resolves', () => {
  const stored: ReplayedOutputs = {
    root: ['t'],
    kind: 'stored',
    outputs: { outputs: { 'lines.0.label': 'A' } },
  };
  it.each<{ name: string; viaApp: boolean; expected: unknown }>([
    { name: 'read anew: the middleware runs', viaApp: true, expected: undefined },
    {
      name: 'the stored value: its output',
      viaApp: false,
      expected: { kind: 'stored', wire: 'A', key: 'lines.0.label', members: {}, errors: {} },
    },
  ])('$name', ({ viaApp, expected }) => {
    const asked: number[] = [];
    const via = (rootLength: number) => (asked.push(rootLength), viaApp);
    expect(outputAt([stored], ['t', 'lines', 0, 'label'], undefined, [], via)).toEqual(expected);
    expect(asked).toEqual([1]);
  });
});

describe('outputAt, a field under another alias than the first call’s', () => {
  const stored: ReplayedOutputs = {
    root: ['a'],
    kind: 'stored',
    outputs: {
      outputs: { tags: ['RED'], 'items.0.t': ['X'] },
      names: { tags: 'tags', 'items.0.tags': 'items.0.t' },
    },
  };
  it.each<{ path: AnswerPath; named: string[] | undefined; expected: unknown }>([
    {
      path: ['b', 'colours'],
      named: ['createOrder', 'tags'],
      expected: {
        kind: 'stored',
        wire: ['RED'],
        key: 'tags',
        members: {},
        errors: {},
        names: stored.outputs.names,
        named: 'tags',
        told: { tags: 'tags', 'items.0.t': 'items.0.tags' },
      },
    },
    {
      path: ['b', 'list', 0, 'labels'],
      named: ['createOrder', 'items', '0', 'tags'],
      expected: {
        kind: 'stored',
        wire: ['X'],
        key: 'items.0.t',
        members: {},
        errors: {},
        names: stored.outputs.names,
        named: 'items.0.tags',
        told: { tags: 'tags', 'items.0.t': 'items.0.tags' },
      },
    },
    // Another field, or no named path (a driver that does not tell the types): not stored.
    { path: ['b', 'other'], named: ['createOrder', 'other'], expected: { kind: 'unstored' } },
    { path: ['b', 'colours'], named: undefined, expected: { kind: 'unstored' } },
  ])('$path named $named', ({ path, named, expected }) => {
    const replay = { ...stored, root: ['b'] };
    expect(outputAt([replay], path, () => named)).toEqual(expected);
  });

  it('a first answer notes each output’s named key, stored by it', async () => {
    const context = {};
    const completed: StoredOutputs[] = [];
    awaitOutputs(context, ['a'], (outputs) => {
      completed.push(outputs);
      return Promise.resolve();
    });
    noteMiddlewarePath(context, ['a', 'colours'], () => ['createOrder', 'tags']);
    noteMiddlewarePath(context, ['a', 'again'], () => ['createOrder', 'tags']);
    await storeOutputsOf(context, { a: { colours: ['RED'], again: ['RED'] } });
    // Two aliases of one field with the same arguments: the first by its named key, each
    // told its own (an object output holds what its alias selected).
    expect(completed).toEqual([
      {
        outputs: { colours: ['RED'], again: ['RED'] },
        names: { tags: 'colours' },
        told: { again: 'tags' },
      },
    ]);
  });

  it.each<{ name: string; key: string; name2: string; expected: string | undefined }>([
    {
      name: 'the second alias of one field: its own output',
      key: 'b',
      name2: 'shipping',
      expected: 'b',
    },
    { name: 'the first alias: its own', key: 'a', name2: 'shipping', expected: 'a' },
    { name: 'another alias: the first', key: 'c', name2: 'shipping', expected: 'a' },
    {
      name: "the second's key given to another field: not it",
      key: 'b',
      name2: 'other',
      expected: undefined,
    },
  ])('storedKeyFor, two aliases of one object field: $name', ({ key, name2, expected }) => {
    const outputs: Record<string, unknown> = { a: { street: 'S' }, b: { city: 'P' } };
    const names = { shipping: 'a' };
    const has = (at: string) => at in outputs;
    expect(storedKeyFor(has, key, name2, names, toldOf(names, { b: 'shipping' }))).toBe(expected);
  });
});

describe('nullingError', () => {
  const forbidden = { message: 'no', path: ['t', 'lines', 1, 'label'] };
  const rates = { message: 'down', path: ['t', 'meta', 'rate'] };
  const located = (errors: AnsweredError[]) =>
    errors.map((error) => ({ error, key: relativeKey(['t'], error.path!)! }));
  it.each<{
    name: string;
    data: unknown;
    path: AnswerPath;
    errors: AnsweredError[];
    expected?: string;
  }>([
    {
      name: 'another item nulled the non-null list, and the mutation',
      data: { t: null },
      path: ['t', 'lines', 0, 'label'],
      errors: [forbidden],
      expected: 'lines.1.label',
    },
    {
      name: 'a sibling nulled the parent',
      data: { t: { id: 1, meta: null } },
      path: ['t', 'meta', 'label'],
      errors: [rates],
      expected: 'meta.rate',
    },
    {
      name: 'an error elsewhere, not under the null ancestor',
      data: { t: { id: 1, meta: null, lines: null } },
      path: ['t', 'meta', 'label'],
      errors: [forbidden],
    },
    {
      name: 'no null ancestor',
      data: { t: { meta: {} } },
      path: ['t', 'meta', 'label'],
      errors: [rates],
    },
    {
      name: "the whole data nulled by the mutation's own field's error (non-null mutation)",
      data: null,
      path: ['t', 'meta', 'label'],
      errors: [rates],
      expected: 'meta.rate',
    },
    {
      name: 'the whole data nulled by another root field: no error under the mutation',
      data: null,
      path: ['t', 'meta', 'label'],
      errors: [],
    },
  ])('$name', ({ data, path, errors, expected }) => {
    expect(nullingError(data, ['t'], path, located(errors))).toBe(expected);
  });

  it.each<{ name: string; data: unknown; path: AnswerPath; expected?: number }>([
    { name: 'the whole data', data: null, path: ['t', 'label'], expected: 0 },
    { name: "the mutation's field", data: { t: null }, path: ['t', 'label'], expected: 1 },
    { name: 'a parent under it', data: { t: { m: null } }, path: ['t', 'm', 'x'], expected: 2 },
    { name: 'none: a value there', data: { t: { label: 'A' } }, path: ['t', 'label'] },
    { name: 'none: not selected', data: { t: {} }, path: ['t', 'label'] },
  ])('nulledAncestor: $name', ({ data, path, expected }) => {
    expect(nulledAncestor(data, path)).toBe(expected);
  });

  it.each<{
    name: string;
    errors: AnsweredError[];
    remade: Record<string, unknown>;
    expected: StoredOutputs;
  }>([
    {
      name: 'another root field nulled the data: each output made again',
      errors: [{ message: 'mail down', path: ['notify'] }],
      remade: { label: 'FIRST', secret: 'S' },
      expected: { outputs: { label: 'FIRST', secret: 'S' } },
    },
    {
      name: 'an error under the mutation nulled it: its own output null, the other made again',
      errors: [{ message: 'no', path: ['t', 'secret'] }],
      remade: { label: 'FIRST', secret: 'S' },
      expected: {
        outputs: { label: 'FIRST', secret: null },
        errors: { secret: { message: 'no' } },
      },
    },
    {
      // Made again with null where GraphQL nulled a field inside it (adversary 84).
      name: 'an error inside an output made again: the output kept, the error at its place',
      errors: [{ message: 'no', path: ['t', 'secret', 'avatar'] }],
      remade: { label: 'FIRST', secret: { avatar: null } },
      expected: {
        outputs: { label: 'FIRST', secret: { avatar: null } },
        errors: { 'secret.avatar': { message: 'no' } },
      },
    },
    {
      name: 'one that cannot be made again: nulled by the error under the mutation',
      errors: [{ message: 'no', path: ['t', 'secret'] }],
      remade: {},
      expected: {
        outputs: { secret: null },
        errors: { secret: { message: 'no' } },
        nulled: { label: 'secret' },
      },
    },
  ])('outputsIn, the whole data nulled: $name', ({ errors, remade, expected }) => {
    const paths: AnswerPath[] = [
      ['t', 'label'],
      ['t', 'secret'],
    ];
    expect(outputsIn(null, ['t'], paths, {}, errors, {}, remade)).toEqual(expected);
  });

  it('outputsIn stores the nulled field with the error that nulled it', () => {
    const stored = outputsIn({ t: null }, ['t'], [['t', 'lines', 0, 'label']], {}, [forbidden]);
    expect(stored).toEqual({
      outputs: {},
      errors: { 'lines.1.label': { message: 'no' } },
      nulled: { 'lines.0.label': 'lines.1.label' },
    });
  });
});

describe('storedKeyFor', () => {
  const outputs = new Set(['a', 'b', 'c']);
  const names = { name: 'a', note: 'b' };
  it.each<{ name: string; key: string; named: string | undefined; expected: string | undefined }>([
    { name: 'the same alias, the same field', key: 'a', named: 'name', expected: 'a' },
    { name: 'aliases swapped: by named key', key: 'a', named: 'note', expected: 'b' },
    { name: 'another alias of a stored field', key: 'x', named: 'name', expected: 'a' },
    { name: 'a stored key of another field', key: 'a', named: 'other', expected: undefined },
    { name: 'a key the first could not name', key: 'c', named: 'other', expected: 'c' },
    { name: 'no named key: by response key', key: 'b', named: undefined, expected: 'b' },
    { name: 'nothing stored', key: 'z', named: undefined, expected: undefined },
  ])('$name', ({ key, named, expected }) => {
    expect(storedKeyFor((at) => outputs.has(at), key, named, names)).toBe(expected);
  });

  it('reads each key’s named key where told (the key twice in one operation)', () => {
    const told = { a: 'name', b: 'note', c: 'name' };
    const has = (at: string) => outputs.has(at);
    expect(storedKeyFor(has, 'c', 'name', names, told)).toBe('c');
    expect(storedKeyFor(has, 'c', 'note', names, told)).toBe('b');
  });
});

describe('the key twice in one operation', () => {
  it('a replay answers the first answer’s middleware results, by key or by named key', () => {
    const context = {};
    awaitOutputs(context, ['a'], () => Promise.resolve(), 'k');
    noteMiddlewarePath(context, ['a', 'tags'], () => ['createOrder', 'tags']);
    const result = Promise.resolve(['RED']);
    noteFirstResult(context, ['a', 'tags'], result);
    noteReplayedOutputs(context, { root: ['b'], kind: 'operation', id: 'k' });
    expect(replayedOutputAt(context, ['b', 'tags'])).toEqual({ kind: 'shared', result });
    const aliased = replayedOutputAt(context, ['b', 'colours'], () => ['createOrder', 'tags']);
    expect(aliased).toEqual({ kind: 'shared', result });
    expect(replayedOutputAt(context, ['b', 'other'], () => ['createOrder', 'other'])).toEqual({
      kind: 'unstored',
    });
    // Another key's first answer: nothing to share (the outputs are pending).
    noteReplayedOutputs(context, { root: ['c'], kind: 'operation', id: 'other' });
    expect(replayedOutputAt(context, ['c', 'tags'])).toEqual({ kind: 'pending' });
  });

  it.each<{ name: string; noted: unknown; asked: unknown; expected: boolean }>([
    { name: 'the same operation', noted: 'op', asked: 'op', expected: true },
    { name: 'another operation', noted: 'op', asked: 'other', expected: false },
    { name: 'no operation noted', noted: undefined, asked: undefined, expected: false },
  ])('completedInOperation: $name', ({ noted: operation, asked, expected }) => {
    const id = `id-${String(operation)}-${String(asked)}`;
    let done: (value: unknown) => void = () => undefined;
    const completion = new Promise((resolve) => (done = resolve));
    noteCompleting(id, completion, operation);
    expect(completedInOperation(id, asked)).toBe(expected);
    done(undefined);
  });
});

describe('pendingWaitMs', () => {
  it.each<{ age: number | undefined; bound: number; expected: number }>([
    { age: undefined, bound: 5000, expected: 5000 },
    { age: 0, bound: 5000, expected: 5000 },
    { age: 1200, bound: 5000, expected: 3800 },
    { age: 5000, bound: 5000, expected: 0 },
    { age: 60_000, bound: 5000, expected: 0 },
    { age: -5, bound: 5000, expected: 5000 },
  ])('stored $age ms ago, bound $bound: $expected', ({ age, bound, expected }) => {
    expect(pendingWaitMs(age, bound)).toBe(expected);
  });
});

describe('pendingBoundMs', () => {
  it.each<{ lease: number; aliveHere: boolean; expected: number }>([
    { lease: 5000, aliveHere: true, expected: 5000 },
    { lease: 5000, aliveHere: false, expected: 1666 },
    { lease: 60_000, aliveHere: true, expected: 60_000 },
    { lease: 60_000, aliveHere: false, expected: 10_000 },
    { lease: 0, aliveHere: true, expected: 1 },
    { lease: 0, aliveHere: false, expected: 1 },
  ])(
    'lease $lease, first call alive here $aliveHere: $expected',
    ({ lease, aliveHere, expected }) => {
      expect(pendingBoundMs(lease, aliveHere)).toBe(expected);
    },
  );
});

describe('a first answer and its replay, on the operation context', () => {
  it('notes the middleware paths and members under the mutation, stores them at the hook', async () => {
    const context = {};
    const completed: StoredOutputs[] = [];
    awaitOutputs(context, ['t'], (outputs) => {
      completed.push(outputs);
      return Promise.resolve();
    });
    noteMiddlewarePath(context, ['t', 'members']);
    noteMiddlewarePath(context, ['other', 'members']);
    noteMember(context, ['t', 'members', 0], 'Member');
    noteMember(context, ['t', 'members', 1], Promise.resolve({ name: 'Guest' }));
    await Promise.resolve();
    await storeOutputsOf(context, { t: { members: [{ n: 1 }, { n: 2 }] } });
    expect(completed).toEqual([
      {
        outputs: { members: [{ n: 1 }, { n: 2 }] },
        members: { 'members.0': 'Member', 'members.1': 'Guest' },
      },
    ]);
    // Once: a second hook call stores nothing again.
    await storeOutputsOf(context, {});
    expect(completed).toHaveLength(1);
  });

  it('keeps the own data of app-resolved fields’ parents inside the outputs only', async () => {
    const context = {};
    const completed: StoredOutputs[] = [];
    awaitOutputs(context, ['t'], (outputs) => {
      completed.push(outputs);
      return Promise.resolve();
    });
    // Before the middleware field ran: not inside an output.
    noteAppParent(
      context,
      () => ['t', 'shipping'],
      () => 'early',
    );
    noteMiddlewarePath(context, ['t', 'shipping']);
    noteAppParent(
      context,
      () => ['t', 'shipping'],
      () => 'kept',
    );
    // Once per place: the first note stays.
    noteAppParent(
      context,
      () => ['t', 'shipping'],
      () => 'again',
    );
    noteAppParent(
      context,
      () => ['t', 'billing'],
      () => 'outside',
    );
    noteAppParent(
      context,
      () => ['other', 'shipping'],
      () => 'other',
    );
    await storeOutputsOf(context, { t: { shipping: { label: 'x' }, billing: { label: 'y' } } });
    expect(completed).toEqual([
      { outputs: { shipping: { label: 'x' } }, parents: { shipping: 'kept' } },
    ]);
  });

  it.each<{ name: string; path: (string | number)[]; expected: boolean }>([
    { name: 'under an output', path: ['t', 'profile', 'history'], expected: true },
    { name: 'an item deeper under it', path: ['t', 'profile', 'history', 0, 'x'], expected: true },
    {
      name: 'the output itself (its middleware marks it)',
      path: ['t', 'profile'],
      expected: false,
    },
    { name: 'beside it', path: ['t', 'billing'], expected: false },
    { name: 'another root field', path: ['u', 'profile', 'history'], expected: false },
  ])('insideFirstOutput: $name', ({ path, expected }) => {
    const context = {};
    expect(insideFirstOutput(context, path)).toBe(false);
    awaitOutputs(context, ['t'], () => Promise.resolve());
    noteMiddlewarePath(context, ['t', 'profile']);
    expect(insideFirstOutput(context, path)).toBe(expected);
  });

  it('answers a replay from its latest noted outputs', () => {
    const context = {};
    noteReplayedOutputs(context, { root: ['t'], kind: 'pending' });
    expect(replayedOutputAt(context, ['t', 'members'])).toEqual({ kind: 'pending' });
    noteReplayedOutputs(context, {
      root: ['t'],
      kind: 'stored',
      outputs: { outputs: { members: [] } },
    });
    expect(replayedOutputAt(context, ['t', 'members'])).toMatchObject({ kind: 'stored' });
    expect(replayedOutputAt(undefined, ['t', 'members'])).toBeUndefined();
  });
});

describe('a stored answer with outputs', () => {
  it.each([
    { kind: 'data' as const, data: { id: 1 }, pending: true as const },
    { kind: 'data' as const, data: { id: 1 }, outputsLost: true as const },
    {
      kind: 'data' as const,
      data: { id: 1 },
      outputs: { members: [{ name: 'Ada' }] },
      members: { 'members.0': 'Member' },
      names: { 'members({"first":1})': 'members' },
    },
    { kind: 'data' as const, data: { id: 1 } },
  ])('reads back as written: %j', (answer) => {
    expect(decodeAnswer(encodeAnswer(answer))).toEqual({ ...answer, format: 3 });
  });
});

describe('a nulled field under another alias', () => {
  const nulled = { 'meta.label': 'meta.rate' };
  const names = { 'meta.label': 'meta.label' };
  it.each<{ name: string; key: string; named?: string; expected?: string }>([
    { name: 'the same keys', key: 'meta.label', named: 'meta.label', expected: 'meta.label' },
    {
      name: 'the field under an alias',
      key: 'meta.l',
      named: 'meta.label',
      expected: 'meta.label',
    },
    {
      name: 'its parent under an alias',
      key: 'm.label',
      named: 'meta.label',
      expected: 'meta.label',
    },
    { name: 'no named key: by the response key', key: 'meta.label', expected: 'meta.label' },
    { name: 'another field under its key', key: 'meta.label', named: 'meta.other' },
  ])('nulledKeyFor: $name', ({ key, named, expected }) => {
    expect(nulledKeyFor(nulled, key, named, names, toldOf(names))).toBe(expected);
  });

  it.each<{ name: string; path: AnswerPath; at: string; by: string; expected: AnswerPath }>([
    {
      name: 'the same operation: the first answer’s place',
      path: ['t', 'meta', 'label'],
      at: 'meta.label',
      by: 'meta.rate',
      expected: ['t', 'meta', 'rate'],
    },
    {
      name: 'the parent under an alias: under the retry’s parent',
      path: ['t', 'm', 'label'],
      at: 'meta.label',
      by: 'meta.rate',
      expected: ['t', 'm', 'rate'],
    },
    {
      name: 'another item of a list',
      path: ['t', 'ls', 0, 'label'],
      at: 'lines.0.label',
      by: 'lines.1.label',
      expected: ['t', 'ls', 1, 'label'],
    },
  ])('nullingPath: $name', ({ path, at, by, expected }) => {
    expect(nullingPath(path, at, by)).toEqual(expected);
  });

  it.each([
    {
      name: 'one output per named key: each alone',
      stored: { outputs: { a: 1, b: 2 }, names: { 'x.f': 'a', 'x.g': 'b' } },
      told: { a: 'x.f', b: 'x.g' },
      named: { 'x.f': ['a'], 'x.g': ['b'] },
    },
    {
      name: "two aliases of one field: both under its name, in the outputs' order",
      stored: { outputs: { a: 1, b: 2 }, names: { 'x.f': 'a' }, told: { b: 'x.f' } },
      told: { a: 'x.f', b: 'x.f' },
      named: { 'x.f': ['a', 'b'] },
    },
    {
      name: 'a named key with no output (a nulled field): told, but no key under it',
      stored: { outputs: { a: 1 }, names: { 'x.f': 'a', 'x.g': 'z' } },
      told: { a: 'x.f', z: 'x.g' },
      named: { 'x.f': ['a'] },
    },
    { name: 'no names stored: none', stored: { outputs: { a: 1 } }, told: {}, named: {} },
  ])('outputsIndex: $name', ({ stored, told, named }) => {
    const outputs = stored as StoredOutputs;
    const index = outputsIndex(outputs);
    expect(index.told).toEqual(told);
    expect(Object.fromEntries(index.keysNamed)).toEqual(named);
    // Read once per stored answer: the same index again.
    expect(outputsIndex(outputs)).toBe(index);
  });
});
