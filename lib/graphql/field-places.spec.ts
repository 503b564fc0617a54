import { fieldPlaces, writesBesideFields } from './field-places.js';

describe('fieldPlaces', () => {
  const renamed: Record<string, string> = { author: 'writer', tags: 'labels', code: 'sku' };
  it.each<[string, string[], string[]]>([
    ['fields read by their names', ['id', 'title'], ['id', 'title']],
    ['a renamed object field', ['id', 'author'], ['id', 'author', 'writer']],
    ['a renamed list and a renamed scalar', ['tags', 'code'], ['tags', 'labels', 'code', 'sku']],
    ['no fields', [], []],
  ])('places %s', (_name, names, places) => {
    expect([...fieldPlaces(names, (name) => renamed[name])]).toEqual(places);
  });

  it.each<[string, boolean]>([
    ['writer', false],
    ['author', false],
    ['id', false],
    ['stages', true],
    ['__typename', true],
  ])('tells %s as data beside the fields: %p', (key, beside) => {
    const places = fieldPlaces(['id', 'author'], (name) => renamed[name]);
    expect(!places.has(key)).toBe(beside);
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
