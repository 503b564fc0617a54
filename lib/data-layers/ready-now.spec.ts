import { readyNow } from './ready-now.js';

describe('readyNow', () => {
  it.each([
    // poolerKnown, levelKnown, schemaCheckPending, ready now
    [true, true, false, true],
    [false, true, false, false],
    [true, false, false, false],
    [true, true, true, false],
    [false, false, true, false],
  ])(
    'pooler known %s, level known %s, schema check pending %s: ready now %s',
    (poolerKnown, levelKnown, schemaCheckPending, expected) => {
      expect(readyNow({ poolerKnown, levelKnown, schemaCheckPending })).toBe(expected);
    },
  );
});
