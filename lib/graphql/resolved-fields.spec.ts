import * as graphql from 'graphql';
import {
  noteResolvedField,
  type ResolutionTold,
  resolutionFrom,
  resolvedFieldsMessage,
  resolvedFieldsUnder,
} from './resolved-fields.js';
import { type ResolverKind } from './resolver-kind.js';

const schema = graphql.buildSchema(`
  interface Node { id: ID! label: String }
  type Receipt implements Node { id: ID! label: String number: Int }
  type Transfer { id: ID! amount: Int receipt: Receipt fees: [Fee!]! payee: Payee }
  type Fee { amount: Int rate: Float }
  type Card { last4: String issuer: String }
  type Bank { iban: String }
  union Payee = Card | Bank
  type Query { ping: Int }
  type Mutation { createTransfer: Transfer! createFee: Fee }
`);
const returnOf = (field: string) => schema.getMutationType()!.getFields()[field].type;

describe('resolvedFieldsUnder', () => {
  beforeAll(() => {
    noteResolvedField('Transfer.fees'); // on the type
    noteResolvedField('Node.label'); // on an interface the type implements
    noteResolvedField('Card.issuer'); // on a member of a union
    noteResolvedField('Elsewhere.amount'); // another type's field of the same name
  });

  it.each([
    [
      'a type, its lists, its interfaces and its unions, at any depth',
      'createTransfer',
      ['Receipt.label', 'Transfer.fees', 'Card.issuer'],
    ],
    ['a type whose fields are all read from the value', 'createFee', []],
  ])('%s', (_name, mutation, expected) => {
    expect(resolvedFieldsUnder(graphql, schema, returnOf(mutation))).toEqual(expected);
  });

  it('names ten fields at most', () => {
    const fields = Array.from({ length: 12 }, (_, i) => `T.f${i}`);
    expect(resolvedFieldsMessage('R.m', fields)).toContain('T.f9 and 2 more)');
  });
});

describe('resolutionFrom', () => {
  it.each<{ name: string; told: ResolutionTold; expected: ResolverKind }>([
    {
      name: 'a @ResolveField(): the app',
      told: { byApp: true, globalMiddleware: true, nest: {} },
      expected: 'app',
    },
    {
      name: 'the global middleware, a code-first field under a transform: middleware',
      told: { byApp: false, kind: 'app', nest: {}, globalMiddleware: true },
      expected: 'middleware',
    },
    {
      name: 'the global middleware, a code-first field behind Apollo: middleware',
      told: { byApp: false, nest: {}, globalMiddleware: true },
      expected: 'middleware',
    },
    {
      name: 'the global middleware, a field Nest did not build (schema first): its code',
      told: { byApp: false, kind: 'app', globalMiddleware: true },
      expected: 'app',
    },
    {
      name: 'no global middleware, a transform: the app',
      told: { byApp: false, kind: 'app', nest: {}, globalMiddleware: false },
      expected: 'app',
    },
    {
      name: "Nest's middleware wrapper: middleware",
      told: { byApp: false, kind: 'middleware', globalMiddleware: false },
      expected: 'middleware',
    },
    {
      name: "out of sight, a @Field()'s own middleware: middleware",
      told: { byApp: false, nest: { middleware: true }, globalMiddleware: false },
      expected: 'middleware',
    },
    {
      name: 'a property read: property',
      told: { byApp: false, kind: 'property', nest: {}, globalMiddleware: false },
      expected: 'property',
    },
  ])('$name', ({ told, expected }) => {
    expect(resolutionFrom(told)).toBe(expected);
  });
});
