import * as graphql from 'graphql';
import { aliasGroups, markErrorUnder, mergedAnswers } from './merged-aliases.js';
import { notStoredField } from './not-stored-field.js';

describe('aliasGroups', () => {
  // The first call stored `call` and `mail` (both `contact`); `other` is another field's key.
  const stored = new Set(['call', 'mail']);
  const own = (responseKey: string) => stored.has(responseKey);
  it.each<{
    name: string;
    asked: string[];
    fallback?: string;
    others?: string[];
    expected: unknown;
  }>([
    {
      name: 'two aliases, each stored: each its own',
      asked: ['call', 'mail'],
      fallback: 'call',
      expected: [
        { storedKey: 'call', nodes: [0] },
        { storedKey: 'mail', nodes: [1] },
      ],
    },
    {
      name: 'one alias twice (two nodes): one group',
      asked: ['call', 'call'],
      fallback: 'call',
      expected: [{ storedKey: 'call', nodes: [0, 1] }],
    },
    {
      name: 'an alias the first call did not use: the field stored key',
      asked: ['phone', 'mail'],
      fallback: 'call',
      expected: [
        { storedKey: 'call', nodes: [0] },
        { storedKey: 'mail', nodes: [1] },
      ],
    },
    {
      name: 'not selected by the first call',
      asked: ['contact'],
      expected: [{ storedKey: undefined, nodes: [0] }],
    },
    {
      name: 'the retry regroups: one key for both, the other stored alias with every node',
      asked: ['call'],
      others: ['call', 'mail'],
      fallback: 'call',
      expected: [
        { storedKey: 'call', nodes: [0] },
        { storedKey: 'mail', nodes: [0] },
      ],
    },
    {
      name: 'the retry regroups under a key of its own: both stored aliases',
      asked: ['contact'],
      others: ['call', 'mail'],
      fallback: 'call',
      expected: [
        { storedKey: 'call', nodes: [0] },
        { storedKey: 'mail', nodes: [0] },
      ],
    },
    {
      name: 'two nodes, the other alias asked too: no group twice',
      asked: ['call', 'mail'],
      others: ['call', 'mail'],
      fallback: 'call',
      expected: [
        { storedKey: 'call', nodes: [0] },
        { storedKey: 'mail', nodes: [1] },
      ],
    },
    {
      name: 'two nodes of one key, another alias stored: it gets both nodes',
      asked: ['call', 'call'],
      others: ['call', 'mail'],
      fallback: 'call',
      expected: [
        { storedKey: 'call', nodes: [0, 1] },
        { storedKey: 'mail', nodes: [0, 1] },
      ],
    },
  ])('$name', ({ asked, fallback, expected, others }) => {
    const nodes = asked.map((_, i) => i);
    expect(aliasGroups(asked, nodes, own, () => fallback, others)).toEqual(expected);
  });
});

describe('mergedAnswers', () => {
  const missing = () => notStoredField(graphql, 'Contact', 'email');
  const failed = new graphql.GraphQLError('boom');
  const underEmail = new graphql.GraphQLError('Cannot return null for non-nullable field');
  const underLine = new graphql.GraphQLError('no sku');
  const underDeep = new graphql.GraphQLError('deep');
  const underHeld = new graphql.GraphQLError('held');
  it.each<{ name: string; first: unknown; second: unknown; expected: unknown }>([
    { name: 'nothing yet: the second', first: undefined, second: { a: 1 }, expected: { a: 1 } },
    {
      name: 'two objects: field by field',
      first: { phone: 'p' },
      second: { email: 'e' },
      expected: { phone: 'p', email: 'e' },
    },
    {
      name: 'a value over a field not stored',
      first: { phone: 'p', email: missing() },
      second: { email: 'e' },
      expected: { phone: 'p', email: 'e' },
    },
    {
      name: 'nested objects, deeply',
      first: { owner: { name: 'a' } },
      second: { owner: { id: 1 } },
      expected: { owner: { name: 'a', id: 1 } },
    },
    {
      name: 'lists item by item',
      first: [{ phone: 'p' }, { phone: 'q' }],
      second: [{ email: 'e' }, { email: 'f' }],
      expected: [
        { phone: 'p', email: 'e' },
        { phone: 'q', email: 'f' },
      ],
    },
    { name: 'two scalars: the first', first: 'x', second: 'y', expected: 'x' },
    { name: 'a null and an object: the first', first: null, second: { a: 1 }, expected: null },
    { name: 'a stored error kept', first: failed, second: { a: 1 }, expected: failed },
    {
      name: 'an error under one alias: put where it was in the other alias object',
      first: markErrorUnder(underEmail, ['email']),
      second: { phone: 'p' },
      expected: { phone: 'p', email: underEmail },
    },
    {
      name: 'the answered alias first, the failed one second: the same',
      first: { phone: 'p' },
      second: markErrorUnder(underEmail, ['email']),
      expected: { phone: 'p', email: underEmail },
    },
    {
      name: 'an error deeper under it, in a list item',
      first: markErrorUnder(underLine, ['lines', 1, 'sku']),
      second: { lines: [{ qty: 1 }, { qty: 2 }] },
      expected: { lines: [{ qty: 1 }, { qty: 2, sku: underLine }] },
    },
    {
      name: 'a step above it the other alias does not hold: the error kept',
      first: markErrorUnder(underDeep, ['owner', 'email']),
      second: { phone: 'p' },
      expected: underDeep,
    },
    {
      name: 'the other alias holds its place (answered there): the error kept',
      first: markErrorUnder(underHeld, ['email']),
      second: { email: 'e' },
      expected: underHeld,
    },
  ])('$name', ({ first, second, expected }) => {
    expect(mergedAnswers(first, second)).toEqual(expected);
  });

  it('keeps the first object (its member marks) and a not-stored field where none answers', () => {
    const first: Record<string, unknown> = { phone: 'p' };
    const mark = Symbol('member');
    Object.defineProperty(first, mark, { value: 'Card' });
    const merged = mergedAnswers(first, { email: missing() }) as Record<string | symbol, unknown>;
    expect(merged).toBe(first);
    expect(merged[mark]).toBe('Card');
    expect((merged.email as graphql.GraphQLError).extensions.code).toBe('field_not_stored');
  });
});
