import * as graphql from 'graphql';
import { namedReader } from './node-classes.js';
import { answerPlacedReadsOf, notePlacedRead, placedRead } from './placed-reads.js';
import { placeOfPath } from './read-places.js';
import { noteResolvedField } from './resolved-fields.js';
import { noteResolverKind } from './resolver-kind.js';
import { selectionOf } from './selection.js';
import { pathOf } from './stored-at-answer.js';
import { fromWire, outputWire } from './wire-value.js';

/**
 * One object answered at two places of a mutation's answer (an order's `primary` line, also
 * `lines[0]`, as an ORM loads a relation and its collection), whose type has a getter field
 * (adversary 110): one object to the app's resolvers at the first call, as without the
 * library; each place answers its own read of the getter (a signed URL signs afresh per
 * read), at the first call and on a replay, which answers the first answer's bytes.
 */
let signed = 0;
class Line {
  order!: Order;
  constructor(
    readonly id: number,
    readonly sku: string,
  ) {}

  get url(): string {
    signed += 1;
    return `/lines/${this.id}?sig=${signed}`;
  }

  get label(): string {
    return `line ${this.id} (${this.sku})`;
  }
}
class Order {
  id = 7;
  lines: Line[] = [new Line(1, 's1'), new Line(2, 's2')];
  primary: Line;
  constructor() {
    for (const line of this.lines) line.order = this;
    this.primary = this.lines[0];
  }
}

/**
 * A read of the parent's property by a resolver of the field's own, as Nest's code-first
 * schema reads a `@Field()`: the only fields the library wraps (field-wrappers.ts).
 */
const read: graphql.GraphQLFieldResolver<Line, unknown> = (source, _args, _context, info) =>
  (source as unknown as Record<string, unknown>)[info.fieldName];
noteResolverKind(read, 'property');

const LineType: graphql.GraphQLObjectType = new graphql.GraphQLObjectType({
  name: 'P110Line',
  fields: () => ({
    id: { type: graphql.GraphQLInt, resolve: read },
    url: { type: graphql.GraphQLString, resolve: read },
    label: { type: new graphql.GraphQLNonNull(graphql.GraphQLString), resolve: read },
    // Schema-first: read by the executor's field resolver (maybe the app's), left alone.
    sku: { type: graphql.GraphQLString },
    // The app's: finds its parent among its order's lines, by identity.
    position: {
      type: graphql.GraphQLInt,
      resolve: (line: Line) => line.order.lines.indexOf(line) + 1,
    },
    isPrimary: {
      type: graphql.GraphQLBoolean,
      resolve: (line: Line) => line.order.primary === line,
    },
  }),
});
noteResolvedField('P110Line.position');
noteResolvedField('P110Line.isPrimary');
const OrderType = new graphql.GraphQLObjectType({
  name: 'P110Order',
  fields: {
    id: { type: graphql.GraphQLInt },
    primary: { type: LineType },
    lines: { type: new graphql.GraphQLList(LineType) },
  },
});

/** How the mutation answers: as the app's own, storing its answer, or replaying it. */
let mode: 'plain' | 'store' | 'replay' = 'plain';
let stored: { wire: unknown; parentGraph?: unknown } | undefined;
const schema: graphql.GraphQLSchema = new graphql.GraphQLSchema({
  query: new graphql.GraphQLObjectType({
    name: 'Query',
    fields: { ping: { type: graphql.GraphQLInt } },
  }),
  mutation: new graphql.GraphQLObjectType({
    name: 'Mutation',
    fields: {
      placeOrder: {
        type: OrderType,
        resolve: async (_root, _args, context: unknown, info): Promise<unknown> => {
          if (mode === 'plain') return new Order();
          if (mode === 'store') {
            const done = await outputWire(
              graphql,
              schema,
              OrderType,
              new Order(),
              selectionOf(info),
              {
                context,
                info,
              },
            );
            stored = JSON.parse(
              JSON.stringify({ wire: done.wire, parentGraph: done.parentGraph }),
            ) as typeof stored;
            return done.value;
          }
          return fromWire(
            graphql,
            schema,
            OrderType,
            stored!.wire,
            undefined,
            selectionOf(info),
            undefined,
            namedReader(stored!.parentGraph),
            placeOfPath(pathOf(info)),
          );
        },
      },
    },
  }),
});
answerPlacedReadsOf(graphql, schema);

async function run(as: typeof mode, selection: string): Promise<string> {
  mode = as;
  const result = await graphql.graphql({ schema, source: `mutation { placeOrder ${selection} }` });
  return JSON.stringify(result);
}

beforeEach(() => {
  signed = 0;
});

describe('one object at two places of an answer, with a getter field', () => {
  it.each<{ name: string; selection: string }>([
    {
      name: 'control: the getter at lines only',
      selection: '{ id primary { id position isPrimary } lines { id label position isPrimary } }',
    },
    {
      name: 'the getter at both places: one object at the first call',
      selection:
        '{ id primary { id label position isPrimary } lines { id label position isPrimary } }',
    },
    {
      name: 'the getter at primary only: replayed, not null',
      selection: '{ id primary { id label position isPrimary } lines { id position isPrimary } }',
    },
    {
      name: 'a getter signing afresh at both places: each place its own read',
      selection: '{ id primary { id url } lines { id url } }',
    },
    {
      name: 'the signed getter under two aliases at each place: each alias its own read',
      selection: '{ id primary { id a: url b: url } lines { b: url id a: url } }',
    },
    {
      name: 'the signed getter under two aliases of primary: stored once, one read for both',
      selection: '{ a: primary { url } b: primary { id url } lines { id url position } }',
    },
  ])('$name', async ({ selection }) => {
    const plain = await run('plain', selection);
    signed = 0;
    const first = await run('store', selection);
    const again = await run('replay', selection);
    expect(JSON.parse(first)).not.toHaveProperty('errors');
    // Aliases of a parent aside (the library reads the object once for all of them, and so
    // its getter once there), as without it.
    if (!selection.includes('a: primary')) expect(first).toBe(plain);
    expect(again).toBe(first);
  });

  it('the signed getter answers each place what the library read there', async () => {
    const first = await run('store', '{ primary { url } lines { url } }');
    expect(JSON.parse(first)).toEqual({
      data: {
        placeOrder: {
          primary: { url: '/lines/1?sig=1' },
          lines: [{ url: '/lines/1?sig=2' }, { url: '/lines/2?sig=3' }],
        },
      },
    });
    // Read once per place, by the library alone.
    expect(signed).toBe(3);
  });
});

describe('answerPlacedReadsOf: the fields it wraps', () => {
  it("wraps a property field's own resolver, never gives one to a field that had none", () => {
    const fields = LineType.getFields();
    expect(fields.url.resolve).not.toBe(read);
    expect(fields.sku.resolve).toBeUndefined();
  });

  it("answers a field with no resolver of its own through the executor's field resolver", async () => {
    const result = await graphql.graphql({
      schema,
      source: 'mutation { placeOrder { primary { sku } } }',
      fieldResolver: (source, args, context, info) =>
        info.fieldName === 'sku'
          ? 'the app’s'
          : graphql.defaultFieldResolver(source, args, context, info),
    });
    expect(result).toEqual({ data: { placeOrder: { primary: { sku: 'the app’s' } } } });
  });
});

describe('placedRead', () => {
  it.each<{ name: string; key: string | number | undefined; answer: string | undefined }>([
    { name: "an alias's own read", key: 'b', answer: 'b own' },
    { name: "another alias: the place's", key: 'a', answer: 'place' },
    { name: "no response key told: the place's", key: undefined, answer: 'place' },
  ])('by response key: $name', ({ key, answer }) => {
    const object = {};
    notePlacedRead(object, [['o'], ['lines'], 1], 'url', () => 'b own', 'b');
    notePlacedRead(object, [['o'], ['lines'], 1], 'url', () => 'place');
    expect(placedRead(object, ['o', 'lines', 1], 'url', key)?.()).toBe(answer);
  });

  it("answers an alias's own read where its place has no read of its own", () => {
    const object = {};
    notePlacedRead(object, [['o'], ['lines'], 0], 'url', () => 'b own', 'b');
    expect(placedRead(object, ['o', 'lines', 0], 'url', 'b')?.()).toBe('b own');
    expect(placedRead(object, ['o', 'lines', 0], 'url', 'a')).toBeUndefined();
    expect(placedRead(object, ['o', 'lines', 1], 'url', 'b')).toBeUndefined();
  });

  it('answers a noted place and property only', () => {
    const object = {};
    notePlacedRead(object, [['o'], ['lines'], 0], 'url', () => 'b');
    expect(placedRead(object, ['o', 'lines', 0], 'url')?.()).toBe('b');
    expect(placedRead(object, ['o', 'primary'], 'url')).toBeUndefined();
    expect(placedRead(object, ['o', 'lines', 0], 'id')).toBeUndefined();
    expect(placedRead({}, ['o', 'lines', 0], 'url')).toBeUndefined();
  });
});
