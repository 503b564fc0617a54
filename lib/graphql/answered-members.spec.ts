import { answeredMemberAt, noteAnsweredMember } from './answered-members.js';

describe('answered members', () => {
  const context = {};
  noteAnsweredMember(context, ['place'], 'Quote');
  noteAnsweredMember(context, ['place', 'items', 1], 'Order');
  it.each<{ name: string; at: unknown; place: (string | number)[]; expected?: string }>([
    { name: 'the object at a place', at: context, place: ['place'], expected: 'Quote' },
    {
      name: 'a list item by its index',
      at: context,
      place: ['place', 'items', 1],
      expected: 'Order',
    },
    { name: 'another item: none', at: context, place: ['place', 'items', 0] },
    { name: 'another operation (context): none', at: {}, place: ['place'] },
    { name: 'no context: none', at: undefined, place: ['place'] },
  ])('$name', ({ at, place, expected }) => {
    expect(answeredMemberAt(at, place)).toBe(expected);
  });
});
