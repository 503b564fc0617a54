import * as graphql from 'graphql';
import {
  isAppResolver,
  loadPlainReaders,
  noteResolvedField,
  resolvedFieldsMessage,
  resolvedFieldsUnder,
} from './resolved-fields.js';

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

describe('isAppResolver', () => {
  // Nest's code-first read of a property, as its factory writes it (one closure per field).
  const nestPlain = (field: { name: string; options: { defaultValue?: unknown } }) => {
    return (root: Record<string, unknown>) => {
      const value = root[field.name];
      return typeof value === 'undefined' ? field.options.defaultValue : value;
    };
  };
  const plain = [Function.prototype.toString.call(nestPlain({ name: 'x', options: {} }))];
  const middleware = (root: Record<string, unknown>) =>
    root.visibility === 'private' ? '***' : root.email;
  // Apollo Server's wrapper, as its schemaInstrumentation writes it (names kept).
  const symbolExecutionDispatcherWillResolveField = Symbol('will');
  const symbolUserFieldResolver = Symbol('user');
  const apolloWrapper = (source: unknown, args: unknown, contextValue: Record<symbol, unknown>) => {
    const willResolveField = contextValue?.[symbolExecutionDispatcherWillResolveField];
    const userFieldResolver = contextValue?.[symbolUserFieldResolver];
    return [source, args, willResolveField, userFieldResolver];
  };
  const loader = async (parent: { accountId: number }) => Promise.resolve(parent.accountId);

  beforeAll(() => loadPlainReaders(graphql));

  it.each<{ name: string; resolve: (...args: never[]) => unknown; expected: boolean }>([
    { name: 'GraphQL’s default resolver', resolve: graphql.defaultFieldResolver, expected: false },
    {
      name: 'Nest’s read of another field’s property',
      resolve: nestPlain({ name: 'amount', options: {} }),
      expected: false,
    },
    { name: 'a field middleware’s wrapper (adversary 74)', resolve: middleware, expected: true },
    { name: 'a Mercurius loader’s resolver (adversary 74)', resolve: loader, expected: true },
    {
      // Its own resolver is out of sight: Nest's metadata tells instead.
      name: 'Apollo Server’s plugins’ wrapper',
      resolve: apolloWrapper,
      expected: false,
    },
  ])('$name: the app’s is $expected', ({ resolve, expected }) => {
    expect(isAppResolver(resolve, plain)).toBe(expected);
  });
});
