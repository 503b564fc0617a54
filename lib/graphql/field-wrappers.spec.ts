import { defaultFieldResolver } from 'graphql';
import { wrapsField } from './field-wrappers.js';

describe('wrapsField: only a field with a resolver of its own is wrapped', () => {
  it.each<{ name: string; field: { resolve?: unknown }; expected: boolean }>([
    {
      name: "a schema-first field (the executor's fieldResolver reads it): left alone",
      field: {},
      expected: false,
    },
    { name: 'a resolve set undefined: left alone', field: { resolve: undefined }, expected: false },
    {
      name: "Nest's code-first read of a @Field() (its own resolve)",
      field: { resolve: (root: { id: number }) => root.id },
      expected: true,
    },
    {
      name: "graphql-js' default resolver set on the field by the app",
      field: { resolve: defaultFieldResolver },
      expected: true,
    },
    { name: 'something not a function', field: { resolve: 'id' }, expected: false },
  ])('$name', ({ field, expected }) => {
    expect(wrapsField(field)).toBe(expected);
  });
});
