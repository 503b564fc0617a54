import * as graphql from 'graphql';
import {
  fieldResolverKind,
  type NestReaders,
  noteOwnResolvers,
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

describe('fieldResolverKind behind Apollo Server’s wrapper', () => {
  beforeAll(() => loadNestReaders(graphql));

  // Apollo Server's wrapper of a field's resolver (its schemaInstrumentation's names kept).
  const symbolExecutionDispatcherWillResolveField = Symbol('will');
  const symbolUserFieldResolver = Symbol('user');
  const wrap = (field: graphql.GraphQLField<unknown, unknown>) => {
    const own = field.resolve;
    field.resolve = (source, args, context, info) => {
      const contextValue = context as Record<symbol, unknown> | undefined;
      const willResolveField = contextValue?.[symbolExecutionDispatcherWillResolveField];
      const userFieldResolver = contextValue?.[symbolUserFieldResolver];
      return (own ?? graphql.defaultFieldResolver)(
        source,
        args,
        [willResolveField, userFieldResolver],
        info,
      );
    };
  };
  const schemaOf = () => {
    const schema = graphql.buildSchema('type Query { a: Int, b: Int, c: Int }');
    const fields = (schema.getType('Query') as graphql.GraphQLObjectType).getFields();
    fields.a.resolve = (root: { a?: number }) => (root.a ?? 0) + 1;
    fields.b.resolve = graphql.defaultFieldResolver;
    return { schema, fields };
  };

  it.each<{ name: string; noted: boolean; field: 'a' | 'b' | 'c'; expected?: ResolverKind }>([
    { name: 'the app’s, noted before the wrapper', noted: true, field: 'a', expected: 'app' },
    { name: 'the default, noted', noted: true, field: 'b', expected: 'property' },
    { name: 'none of its own, noted', noted: true, field: 'c', expected: undefined },
    { name: 'not noted: out of sight', noted: false, field: 'a', expected: undefined },
  ])('$name: $expected', ({ noted, field, expected }) => {
    const { schema, fields } = schemaOf();
    if (noted) noteOwnResolvers(schema);
    Object.values(fields).forEach(wrap);
    // Noted again after the wrapper (another start): the first note stays.
    noteOwnResolvers(schema);
    expect(fieldResolverKind(fields[field])).toBe(expected);
  });

  it('a resolver put on after the wrapper is read as it is', () => {
    const { schema, fields } = schemaOf();
    noteOwnResolvers(schema);
    wrap(fields.a);
    fields.a.resolve = graphql.defaultFieldResolver;
    expect(fieldResolverKind(fields.a)).toBe('property');
  });
});
