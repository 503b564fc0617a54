import { recordInNode } from './record-in-node.js';

const hidden = (target: object, key: string, value: unknown) =>
  Object.defineProperty(target, key, { value, enumerable: false, writable: true });

class Row {
  id = 1;
  notes = 'n';
}

describe('recordInNode', () => {
  const order = { id: 9 };
  const cache = 'c'.repeat(10);
  const line = hidden(hidden({ id: 1 }, 'order', order), 'cache', cache);
  const lineRecord = hidden(hidden({}, 'order', order), 'cache', cache);
  const lines = [{ id: 1 }];

  it.each<[string, object, object, string[], boolean]>([
    ['its hidden data, its selected id answered', lineRecord, line, ['id'], true],
    ['its selected id not answered (another place selects it)', lineRecord, line, [], false],
    ['an unselected column it does not keep', {}, { id: 1, sku: 'a' }, ['id'], false],
    ['an unselected column it keeps', { sku: 'a' }, { id: 1, sku: 'a' }, ['id'], true],
    ['a copy, not its own value', { tags: ['a'] }, { tags: ['a'] }, [], false],
    ['the very array (a selected list kept itself)', { lines }, { id: 1, lines }, ['id'], true],
    ['as enumerable where it is hidden', { order }, hidden({}, 'order', order), [], false],
    ['a member it does not have (a default filled in)', { note: undefined }, {}, [], false],
    [
      'a getter of its own, never written',
      {},
      Object.defineProperty({}, 'eta', { get: () => 1, enumerable: true }),
      [],
      false,
    ],
    ['an instance of a class, answered and kept', { notes: 'n' }, new Row(), ['id'], true],
    [
      'no prototype (a dictionary-style row): its node has none either',
      lineRecord,
      hidden(
        hidden(Object.assign(Object.create(null) as object, { id: 1 }), 'order', order),
        'cache',
        cache,
      ),
      ['id'],
      true,
    ],
    [
      'an own enumerable getter the walk read into the record',
      { label: 'L1' },
      Object.defineProperty({ id: 1 }, 'label', { get: () => 'L1', enumerable: true }),
      ['id'],
      true,
    ],
    [
      'an own hidden getter, written by neither',
      {},
      Object.defineProperty({ id: 1 }, 'eta', { get: () => 1, enumerable: false }),
      ['id'],
      true,
    ],
    [
      'a hidden getter where the record holds hidden data',
      hidden({}, 'eta', 1),
      Object.defineProperty({}, 'eta', { get: () => 1, enumerable: false }),
      [],
      false,
    ],
    ['an array', {}, [], [], false],
    ['a Map', {}, new Map(), [], false],
    [
      'a registered symbol it keeps',
      { [Symbol.for('tag')]: 1 },
      { [Symbol.for('tag')]: 1 },
      [],
      true,
    ],
    ['an unregistered symbol, written by neither', {}, { [Symbol('local')]: 1 }, [], true],
  ])('%s', (_name, record, source, answered, expected) => {
    expect(recordInNode(record, source, new Set(answered))).toBe(expected);
  });
});
