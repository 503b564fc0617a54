import {
  besideFieldsMember,
  fieldPlaces,
  renamedFieldNames,
  writesBesideFields,
} from './field-places.js';

describe('fieldPlaces', () => {
  const renamed: Record<string, string> = { author: 'writer', tags: 'labels', code: 'sku' };
  it.each<[string, string[], string[]]>([
    ['fields read by their names', ['id', 'title'], ['id', 'title']],
    ['a renamed object field', ['id', 'author'], ['id', 'writer']],
    ['a renamed list and a renamed scalar', ['tags', 'code'], ['labels', 'sku']],
    ['no fields', [], []],
  ])('places %s', (_name, names, places) => {
    expect([...fieldPlaces(names, (name) => renamed[name])]).toEqual(places);
  });

  it.each<[string, boolean]>([
    ['writer', false],
    ['author', true],
    ['id', false],
    ['stages', true],
    ['__typename', true],
  ])('tells %s as data beside the fields: %p', (key, beside) => {
    const places = fieldPlaces(['id', 'author'], (name) => renamed[name]);
    expect(!places.has(key)).toBe(beside);
  });
});

describe('fieldPlaces, renamedFieldNames: renames onto one another (adversary 100)', () => {
  it.each<[string, Record<string, string>, string[], string[]]>([
    ['a swapped pair', { a: 'b', b: 'a' }, ['b', 'a'], ['a', 'b']],
    ['a chain of three renames', { y: 'x', z: 'y', w: 'z' }, ['x', 'y', 'z'], ['y', 'z', 'w']],
    ['renamed onto a hidden property', { id: 'uuid' }, ['uuid'], ['id']],
    ['renamed, and an app field of its property name', { label: 'title' }, ['title'], ['label']],
    ['unrenamed', { title: 'title' }, ['title'], []],
  ])('%s', (_what, properties, places, renamedNames) => {
    const names = Object.keys(properties);
    expect([...fieldPlaces(names, (name) => properties[name])]).toEqual(places);
    expect([...renamedFieldNames(names, (name) => properties[name])]).toEqual(renamedNames);
  });
});

describe('besideFieldsMember', () => {
  const renamedNames = new Set(['id']);
  it.each<[string, boolean, 'kept' | 'parent']>([
    ['id', true, 'parent'],
    ['id', false, 'parent'],
    ['internal', true, 'kept'],
    ['internal', false, 'parent'],
    ['__typename', false, 'kept'],
  ])('keeps %s (by class: %p) in %s', (name, byClass, member) => {
    expect(besideFieldsMember(name, byClass, renamedNames)).toBe(member);
  });
});

describe('writesBesideFields', () => {
  const fromFields = new Set(['writer', 'labels']);
  it.each<[string, unknown, boolean]>([
    ['writer', { first: 'Ada' }, false],
    ['labels', ['a'], false],
    ['writer', null, false],
    ['writer', undefined, true],
    ['stages', { prototype: 1 }, true],
    ['author', { first: 'Ada' }, true],
  ])('writes %s (%p) beside the stored fields: %p', (name, item, writes) => {
    expect(writesBesideFields(name, item, fromFields)).toBe(writes);
  });
});
