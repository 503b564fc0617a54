import { absentOnReplay, lackedFields, notedAbsentFields } from './absent-fields.js';

describe('notedAbsentFields: the absent selected fields noted on the stored object', () => {
  it.each<[string, string[], boolean, string[] | undefined]>([
    ['an app resolver reads it: noted', ['subtitle'], true, ['subtitle']],
    ['several, in the selection order', ['subtitle', 'cover'], true, ['subtitle', 'cover']],
    ['nothing reads its data: GraphQL alone reads the null', ['subtitle'], false, undefined],
    ['none absent: nothing stored', [], true, undefined],
    ['none absent, nothing reads it', [], false, undefined],
  ])('%s', (_name, absent, readsItsData, noted) => {
    expect(notedAbsentFields(absent, readsItsData)).toEqual(noted);
  });
});

describe('absentOnReplay: the fields a replay leaves off its object', () => {
  it.each<[string, unknown, string[]]>([
    ['the noted fields', ['subtitle', 'cover'], ['subtitle', 'cover']],
    ['a record stored before they were noted', undefined, []],
    ['a stored null', null, []],
    ['not a list', { subtitle: true }, []],
    ['what is not a name is skipped', ['subtitle', 3, null], ['subtitle']],
    ['an empty list', [], []],
  ])('%s', (_name, stored, absent) => {
    expect([...absentOnReplay(stored)]).toEqual(absent);
  });
});

describe("lackedFields: the fields a middleware output's parent lacks", () => {
  const field = (name: string, property = name, filled = false) => ({ name, property, filled });
  it.each<[string, ReturnType<typeof field>[], string[], string[]]>([
    ['one left out', [field('id'), field('subtitle')], ['id'], ['subtitle']],
    ['all there: none', [field('id'), field('title')], ['id', 'title'], []],
    ['read at its class property', [field('price', 'priceCents')], ['price'], ['price']],
    ['there at its class property', [field('price', 'priceCents')], ['priceCents'], []],
    ['filled by its defaultValue: not lacked', [field('status', 'status', true)], [], []],
    ['several, in the type order', [field('b'), field('a'), field('c')], ['a'], ['b', 'c']],
  ])('%s', (_name, fields, has, lacked) => {
    expect(lackedFields(fields, (property) => has.includes(property))).toEqual(lacked);
  });
});
