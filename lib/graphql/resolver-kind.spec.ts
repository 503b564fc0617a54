import * as graphql from 'graphql';
import {
  type NestReaders,
  type ResolverKind,
  loadNestReaders,
  resolverKind,
} from './resolver-kind.js';

describe('resolverKind', () => {
  // Nest's code-first read of a property, as its factory writes it (one closure per field).
  const nestPlain = (field: { name: string; options: { defaultValue?: unknown } }) => {
    return (root: Record<string, unknown>) => {
      const value = root[field.name];
      return typeof value === 'undefined' ? field.options.defaultValue : value;
    };
  };
  // Nest's wrapper of a resolver in field middleware (its shape: one closure per field).
  const nestWrapped = (middleware: unknown[]) => {
    return (root: unknown, args: unknown) => [root, args, middleware.length];
  };
  const readers: NestReaders = {
    plain: [Function.prototype.toString.call(nestPlain({ name: 'x', options: {} }))],
    middleware: [Function.prototype.toString.call(nestWrapped([]))],
  };
  const appResolver = (root: Record<string, unknown>) =>
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

  beforeAll(() => loadNestReaders(graphql));

  it.each<{
    name: string;
    resolve: (...args: never[]) => unknown;
    expected: ResolverKind | undefined;
  }>([
    {
      name: 'GraphQL’s default resolver',
      resolve: graphql.defaultFieldResolver,
      expected: 'property',
    },
    {
      name: 'Nest’s read of another field’s property',
      resolve: nestPlain({ name: 'amount', options: {} }),
      expected: 'property',
    },
    {
      // Its heart is the property read (adversary 75: a getter behind it, stored).
      name: 'Nest’s field middleware wrapper, own or global',
      resolve: nestWrapped([() => '***']),
      expected: 'middleware',
    },
    {
      name: 'a schema resolver of the app’s (adversary 74)',
      resolve: appResolver,
      expected: 'app',
    },
    { name: 'a Mercurius loader’s resolver (adversary 74)', resolve: loader, expected: 'app' },
    {
      // Its own resolver is out of sight: Nest's metadata tells instead.
      name: 'Apollo Server’s plugins’ wrapper',
      resolve: apolloWrapper,
      expected: undefined,
    },
  ])('$name: $expected', ({ resolve, expected }) => {
    expect(resolverKind(resolve, readers)).toBe(expected);
  });
});
