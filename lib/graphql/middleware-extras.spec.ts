import { fitExtras, getterFields, withGetterFields } from './middleware-extras.js';

class Comment {
  text = 'hi';
  deletedAt: Date | null = null;
  get deleted(): boolean {
    return this.deletedAt !== null;
  }
  get broken(): string {
    throw new Error('no');
  }
  get lazy(): Promise<string> {
    return Promise.reject(new Error('not loaded'));
  }
  describe(): string {
    return this.text;
  }
}

describe('fitExtras', () => {
  it.each<[string, Record<string, unknown>, number, string[], string[], number]>([
    ['nothing', {}, 10, [], [], 10],
    ['all fit', { a: 1, b: 'xy' }, 10, ['a', 'b'], [], 5],
    ['exactly the budget', { a: 'abcdefgh' }, 10, ['a'], [], 0],
    ['a large one dropped', { avatar: 'x'.repeat(50) }, 10, [], ['avatar'], 10],
    [
      'a smaller one after a dropped one kept',
      { big: 'x'.repeat(50), id: 7 },
      10,
      ['id'],
      ['big'],
      9,
    ],
    ['no budget left', { a: 1 }, 0, [], ['a'], 0],
  ])('%s', (_name, extras, remaining, kept, dropped, left) => {
    // Sized here as JSON's length, for a readable table (the default: see `keptBytes`).
    const fitted = fitExtras(extras, remaining, (value) => JSON.stringify(value).length);
    expect(Object.keys(fitted.kept)).toEqual(kept);
    expect(fitted.dropped).toEqual(dropped);
    expect(fitted.remaining).toBe(left);
  });
});

describe('getterFields', () => {
  it.each<[string, object, string[], Record<string, unknown>]>([
    ['a class getter', new Comment(), ['deleted'], { deleted: false }],
    ['own data is not a getter', new Comment(), ['text', 'deletedAt'], {}],
    ['a getter that throws, left out', new Comment(), ['broken'], {}],
    ['a Promise (a lazy relation), left out', new Comment(), ['lazy'], {}],
    ['a method, left out', new Comment(), ['describe'], {}],
    ['absent', new Comment(), ['nope'], {}],
    [
      'an own getter',
      {
        get total() {
          return 3;
        },
      },
      ['total'],
      { total: 3 },
    ],
  ])('%s', (_name, source, names, read) => {
    expect(getterFields(source, names)).toEqual(read);
  });
});

describe('withGetterFields', () => {
  const deleted = Object.assign(new Comment(), { deletedAt: new Date(0) });

  it.each<[string, object, (copy: object) => unknown, unknown]>([
    [
      "a Map's values given their getter fields as own data",
      new Map([['a', deleted]]),
      (copy) => Object.getOwnPropertyDescriptor((copy as Map<string, Comment>).get('a'), 'deleted'),
      { value: true, enumerable: true, writable: true, configurable: true },
    ],
    [
      "a Set's values",
      new Set([deleted]),
      (copy) => Object.keys([...(copy as Set<Comment>)][0]),
      ['text', 'deletedAt', 'deleted'],
    ],
    [
      "a record's values",
      { a: deleted },
      (copy) => Object.keys((copy as Record<string, Comment>).a),
      ['text', 'deletedAt', 'deleted'],
    ],
    [
      'scalars as they are',
      new Map([['a', 1]]),
      (copy) => [...(copy as Map<string, number>)],
      [['a', 1]],
    ],
    [
      'an instance of a class container, as it is',
      new (class Lines {
        a = deleted;
      })(),
      (copy) => Object.keys((copy as { a: object }).a),
      ['text', 'deletedAt'],
    ],
  ])('%s', (_name, container, read, expected) => {
    expect(read(withGetterFields(container, ['deleted']))).toEqual(expected);
  });

  it("keeps the value's class, and leaves the resolver's own value as it was", () => {
    const lines = new Map([['a', deleted]]);
    const copy = withGetterFields(lines, ['deleted']) as Map<string, Comment>;
    expect(copy.get('a')).toBeInstanceOf(Comment);
    expect(copy.get('a')).not.toBe(deleted);
    expect(Object.keys(deleted)).toEqual(['text', 'deletedAt']);
  });
});
