import { absentOnReplay, notedAbsentFields } from './absent-fields.js';

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
