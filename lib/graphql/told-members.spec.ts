import { noteToldMember, noteViewOf, toldMemberOf } from './told-members.js';

describe('toldMemberOf: the member told ahead, for graphql-js to reuse', () => {
  const context = {};
  const cat = { meow: 'meow' };
  const view = new Proxy(cat, {});
  noteViewOf(view, cat);
  noteToldMember(context, cat, ['addOwner', 'pet'], 'Cat');

  const cases: [string, unknown, unknown, (string | number)[], string | undefined][] = [
    ['the object, at the field it was told at', context, cat, ['addOwner', 'pet'], 'Cat'],
    ['its first answer’s Proxy, at that field', context, view, ['addOwner', 'pet'], 'Cat'],
    ['at another field: the app’s resolveType() tells', context, cat, ['addOwner', 'b'], undefined],
    ['in another operation: told afresh', {}, cat, ['addOwner', 'pet'], undefined],
    ['another object', context, { meow: 'meow' }, ['addOwner', 'pet'], undefined],
    ['no context object', undefined, cat, ['addOwner', 'pet'], undefined],
    ['a leaf', context, 'meow', ['addOwner', 'pet'], undefined],
  ];
  it.each(cases)('%s', (_case, within, value, path, member) => {
    expect(toldMemberOf(within, value, path)).toBe(member);
  });

  it('notes nothing without a context object', () => {
    const dog = {};
    noteToldMember(undefined, dog, ['p'], 'Dog');
    expect(toldMemberOf(undefined, dog, ['p'])).toBeUndefined();
  });
});
