import { namedReader } from './node-classes.js';
import * as graphql from 'graphql';
import {
  GraphQLEnumType,
  GraphQLID,
  GraphQLInputObjectType,
  GraphQLInt,
  GraphQLList,
  GraphQLNonNull,
  GraphQLObjectType,
  GraphQLScalarType,
  GraphQLSchema,
  GraphQLString,
  GraphQLUnionType,
} from 'graphql';
import {
  Field as NestField,
  ID as NestID,
  ObjectType as NestObjectType,
  TypeMetadataStorage as NestTypeMetadataStorage,
} from '@nestjs/graphql';
import { Readable } from 'node:stream';
import { loadNestFields } from './nest-fields.js';
import { graphReachedBy, parentRefIndex } from './parent-graph.js';
import { type Graph } from './typed-graph.js';
import { FIELD_NOT_STORED, notStoredFieldMessage } from './not-stored-field.js';
import { type ReplayLoss } from './replay-loss.js';
import { noteResolvedField } from './resolved-fields.js';
import { loadNestReaders } from './resolver-kind.js';
import { type Selection } from './selection.js';
import {
  argumentsWire,
  fromWire,
  ArgumentValueInvalidError,
  ACCESSORS,
  FROM_CLASS,
  INSTANCE,
  PROMISED,
  KEPT,
  KEYS,
  PARENT,
  PARENT_CLASSES,
  KEPT_CLASSES,
  NotJsonArgumentError,
  outputWire,
  strictJson,
} from './wire-value.js';

/** graphql-scalars' DateTime: its serialize() gives the Date itself, which JSON writes. */
const DateTimeAsDate = new GraphQLScalarType<Date, Date>({
  name: 'DateTimeAsDate',
  serialize: (value) => value as Date,
  parseValue: (value) => new Date(value as string),
});
/** A scalar that hands its value on as it is, whatever it is. */
const Passthrough = new GraphQLScalarType({ name: 'Passthrough' });
/** A Date scalar that, as Nest's, serializes a Date only. */
const DateTime = new GraphQLScalarType({
  name: 'DateTime',
  serialize: (value) => (value instanceof Date ? value.toISOString() : null),
  parseValue: (value) => new Date(value as string),
});
const Cents = new GraphQLScalarType({
  name: 'Cents',
  serialize(value) {
    if (typeof value !== 'bigint') throw new TypeError('not a bigint');
    return value;
  },
  parseValue: (value) => BigInt(value as string),
});
/** A money class, as a Decimal is: its scalar writes it as digits and reads them as a number. */
class Money {
  constructor(readonly cents: number) {}
  format(): string {
    return `$${this.cents / 100}`;
  }
}
const Amount = new GraphQLScalarType({
  name: 'Amount',
  serialize(value) {
    if (!(value instanceof Money)) throw new TypeError('not Money');
    return (value.cents / 100).toFixed(2);
  },
  parseValue: (value) => Number(value),
});
const Upload = new GraphQLScalarType({
  name: 'Upload',
  serialize() {
    throw new Error('Upload serialization unsupported.');
  },
});
const Priority = new GraphQLEnumType({
  name: 'Priority',
  values: { Low: { value: 1 }, High: { value: 2 } },
});
const Line = new GraphQLObjectType({
  name: 'Line',
  fields: { id: { type: GraphQLID }, text: { type: GraphQLString } },
});
const Receipt = new GraphQLObjectType({
  name: 'Receipt',
  fields: {
    id: { type: new GraphQLNonNull(GraphQLInt) },
    at: { type: DateTime },
    total: { type: Cents },
    priority: { type: Priority },
    reminders: { type: new GraphQLList(DateTime) },
    label: { type: GraphQLString },
    ref: { type: GraphQLID },
    refs: { type: new GraphQLList(GraphQLID) },
    lines: { type: new GraphQLList(Line) },
    price: { type: Amount },
  },
});
const Window = new GraphQLInputObjectType({
  name: 'Window',
  fields: { from: { type: DateTime }, note: { type: GraphQLString } },
});
const Refusal = new GraphQLObjectType({
  name: 'Refusal',
  fields: { id: { type: GraphQLInt }, reason: { type: GraphQLString } },
});
/** Told apart by a field, as the guide says a union must be: no `__typename` in the value. */
const Outcome = new GraphQLUnionType({
  name: 'Outcome',
  types: [Receipt, Refusal],
  resolveType: (value: { reason?: unknown }) => ('reason' in value ? 'Refusal' : 'Receipt'),
});
/** A union whose resolveType() cannot tell outside the answer (it reads what only it has). */
const Unknowable = new GraphQLUnionType({
  name: 'Unknowable',
  types: [Receipt, Refusal],
  resolveType: () => {
    throw new Error('only inside the answer');
  },
});
const schema = new GraphQLSchema({
  query: new GraphQLObjectType({
    name: 'Query',
    fields: {
      receipt: { type: Receipt },
      outcome: { type: Outcome },
      unknowable: { type: Unknowable },
    },
  }),
});
/** What the field's resolver was given: only its context and info reach a resolveType(). */
const call = { context: {}, info: {} as graphql.GraphQLResolveInfo };

/** The selection `set` of a field, as GraphQL hands it to the field's resolver. */
function selecting(set: string): Selection {
  const document = graphql.parse(`{ field ${set} }`);
  const [operation] = document.definitions as [graphql.OperationDefinitionNode];
  return {
    nodes: [operation.selectionSet.selections[0] as graphql.FieldNode],
    fragments: {},
    variables: {},
  };
}
/**
 * What a test that is not about the selection selects: the fields of the type that the value
 * has (so that a field it has not is not stored as a selected null), `lines` with theirs.
 */
/**
 * `outputWire` with each parent's `__parent` written as its own graph (the nodes its data
 * reaches in the answer's shared graph, parent-graph.ts), as records stored before the shared
 * graph hold them: the form these cases compare, and read back by `fromWire` as such a record
 * is. The shared form itself has its own cases ("one graph for an answer's parents").
 */
const outputWireApart = async (
  ...args: Parameters<typeof outputWire>
): ReturnType<typeof outputWire> => {
  const stored = await outputWire(...args);
  for (const holder of stored.parents ?? []) {
    const node = parentRefIndex((holder as Record<string, unknown>)[PARENT]);
    if (node === undefined || !stored.parentGraph) continue;
    const own = graphReachedBy(stored.parentGraph, [node]);
    if (own.moved.get(node) !== 0) throw new Error('a parent whose data is not its first node');
    (holder as Record<string, unknown>)[PARENT] = own.graph;
  }
  // Each `__kept` too, as the graph of its own it was stored as before it was shared.
  for (const holder of stored.keptHolders ?? []) {
    const node = parentRefIndex((holder as Record<string, unknown>)[KEPT]);
    if (node === undefined || !stored.parentGraph) continue;
    const own = graphReachedBy(stored.parentGraph, [node]);
    if (own.moved.get(node) !== 0) throw new Error('a __kept whose data is not its first node');
    (holder as Record<string, unknown>)[KEPT] = { g: own.graph.g };
  }
  return { ...stored, parentGraph: undefined };
};

const selectionFor = (type: graphql.GraphQLOutputType, value: unknown): Selection => {
  const has = (name: string) => typeof value === 'object' && value !== null && name in value;
  const receipt = Object.keys(Receipt.getFields())
    .filter(has)
    .map((name) => (name === 'lines' ? 'lines { id text }' : name))
    .join(' ');
  return graphql.getNamedType(type) === Receipt
    ? selecting(`{ ${receipt} }`)
    : selecting(`{ ... on Receipt { ${receipt} } ... on Refusal { id reason } }`);
};
/** The value's stored form, as `set` selects it (by default every field its type has). */
const wireOf = async (
  type: graphql.GraphQLOutputType,
  value: unknown,
  set?: string,
  losses?: ReplayLoss[],
) =>
  (
    await outputWireApart(
      graphql,
      schema,
      type,
      value,
      set ? selecting(set) : selectionFor(type, value),
      call,
      losses,
    )
  ).wire;

class Labelled {
  id = 1;
  ownerId = 7;
  get label() {
    return 'from a getter';
  }
  describe() {
    return 'a method';
  }
}

describe('outputWire and fromWire', () => {
  const at = new Date('2026-03-01T09:30:00.000Z');
  it.each([
    [
      'a Date, a bigint, an enum and a list of Dates',
      { id: 1, at, total: 12n, priority: 2, reminders: [at] },
      { id: 1, at: at.toISOString(), total: '12', priority: 'High', reminders: [at.toISOString()] },
    ],
    ['nulls', { id: 1, at: null, reminders: null }, { id: 1, at: null, reminders: null }],
    [
      "a class's getter, and its own data that is no field (for a @ResolveField()) beside",
      new Labelled(),
      // `label` given through the class: not enumerable (FROM_CLASS), and replayed through a
      // getter (ACCESSORS).
      {
        id: 1,
        label: 'from a getter',
        // Data that is no field: what a replay may do without (left out first when too large).
        [PARENT]: { g: [['o', 'ownerId', 7]] },
        [FROM_CLASS]: ['label'],
        [ACCESSORS]: ['label'],
      },
    ],
    [
      'its own __typename (the answer) in KEPT, its other data that is no field in PARENT',
      { id: 1, __typename: 'Receipt', note: 'x' },
      {
        id: 1,
        [KEPT]: { g: [['o', '__typename', 'Receipt']] },
        [PARENT]: { g: [['o', 'note', 'x']] },
      },
    ],
    [
      'an ID that was a number, the numbers beside (its parseValue() gives back strings)',
      { id: 1, ref: 5, refs: [1, 2] },
      {
        id: 1,
        ref: '5',
        refs: ['1', '2'],
        [KEPT]: {
          g: [
            ['o', 'ref', 5, 'refs', ['@', 1]],
            ['a', 2, [1, 2]],
          ],
        },
      },
    ],
    [
      'a Date and a BigInt that are no field, with their types',
      { id: 1, createdAt: at, ledgerSeq: 9007199254740993n },
      {
        id: 1,
        [PARENT]: {
          g: [
            ['o', 'createdAt', ['@', 1], 'ledgerSeq', ['n', '9007199254740993']],
            ['d', at.getTime()],
          ],
        },
      },
    ],
    [
      'a field whose value is a Promise (a lazy relation), awaited',
      { id: 1, at: Promise.resolve(at), reminders: Promise.resolve([Promise.resolve(at)]) },
      // Replayed as Promises again (PROMISED).
      {
        id: 1,
        at: at.toISOString(),
        reminders: [at.toISOString()],
        [PROMISED]: ['at', 'reminders'],
      },
    ],
  ])('stores %s as GraphQL writes it', async (_name, value, wire) => {
    expect(await wireOf(Receipt, value)).toEqual(wire);
  });

  it('tells the objects it wrote PARENT into, by identity (the only places it may be left out)', async () => {
    const stored = await outputWireApart(
      graphql,
      schema,
      Receipt,
      { id: 1, note: 'x', lines: [{ id: 2, text: 'a' }] },
      selecting('{ id lines { id text } }'),
      call,
    );
    const wire = stored.wire as Record<string, unknown> & { lines: object[] };
    expect(stored.parents).toHaveLength(1);
    expect(stored.parents![0]).toBe(wire);
    expect(wire[PARENT]).toEqual({ g: [['o', 'note', 'x']] });
  });

  it('turns a stored answer back into values that serialize to the same wire form', async () => {
    const value = { id: 1, at, total: 12n, priority: 2, reminders: [at], ownerId: 7 };
    const set = '{ id at total priority reminders }';
    const stored = JSON.parse(JSON.stringify(await wireOf(Receipt, value, set))) as unknown;
    const replayed = fromWire(graphql, schema, Receipt, stored) as typeof value;
    expect(replayed).toEqual(value);
    expect(await wireOf(Receipt, replayed, set)).toEqual(stored);
  });

  it.each<[string, Record<string, unknown>, 'plain' | 'throws', number]>([
    [
      "a parent's own data of a class not one in this process: plain, said (adversary 96)",
      {
        [PARENT]: { json: { owner: { name: 'Ada' } } },
        [PARENT_CLASSES]: { k: { owner: { c: 'NoSuchUser' } } },
      },
      'plain',
      1,
    ],
    [
      'the same class in the answer own kept data: still an error',
      {
        [KEPT]: { json: { owner: { name: 'Ada' } } },
        [KEPT_CLASSES]: { k: { owner: { c: 'NoSuchUser' } } },
      },
      'throws',
      0,
    ],
  ])('%s', (_name, data, expected, warnings) => {
    const said: string[] = [];
    const read = () =>
      fromWire(graphql, schema, Receipt, { id: 1, ...data }, undefined, undefined, (message) =>
        said.push(message),
      ) as { owner: object };
    if (expected === 'throws') expect(read).toThrow(/NoSuchUser/);
    else {
      const replayed = read();
      expect(replayed.owner).toEqual({ name: 'Ada' });
      expect(replayed.owner.constructor).toBe(Object);
      expect(said[0]).toMatch(/Receipt.*NoSuchUser/);
    }
    expect(said).toHaveLength(warnings);
  });

  /** Stored as the store keeps it (JSON text), and read back as a replay reads it. */
  const replayOf = async (type: graphql.GraphQLOutputType, value: unknown) => {
    const stored = JSON.parse(JSON.stringify(await wireOf(type, value))) as unknown;
    return fromWire(graphql, schema, type, stored);
  };

  it('replays a Promise field as a Promise of its stored value (a lazy relation: adversary 66)', async () => {
    const replayed = (await replayOf(Receipt, { id: 1, at: Promise.resolve(at) })) as {
      at: unknown;
    };
    expect(replayed.at).toBeInstanceOf(Promise);
    expect(await replayed.at).toEqual(at);
  });

  it("replays a getter's field through a getter: no own key, and a copy keeping the prototype reads it (adversary 66)", async () => {
    const replayed = (await replayOf(Receipt, new Labelled())) as Record<string, unknown>;
    expect(replayed.label).toBe('from a getter');
    expect(Object.keys(replayed)).not.toContain('label');
    expect(JSON.parse(JSON.stringify(replayed))).not.toHaveProperty('label');
    const copy = Object.assign(
      Object.create(Object.getPrototypeOf(replayed) as object) as object,
      replayed,
    ) as Record<string, unknown>;
    expect(copy.label).toBe('from a getter');
    // Written, it is the object's own data from then on.
    replayed.label = 'masked';
    expect(replayed.label).toBe('masked');
    expect(copy.label).toBe('from a getter');
  });

  it.each<[string, unknown]>([
    ["an object's Date and BigInt that are no field", { id: 1, createdAt: at, seq: 2n ** 64n }],
    ['an ID that was a number, and a list of them', { id: 1, ref: 5, refs: [1, 2] }],
    ['a String field that was a number', { id: 1, label: 5 }],
    ['a field that is there, undefined', { id: 1, at: undefined, lines: undefined }],
    [
      'undefined, a Set and a Map that are no field',
      { id: 1, note: undefined, tags: new Set(['a']) },
    ],
    [
      'an object under it, with its own Date and a numeric ID',
      { id: 1, lines: [{ id: 7, text: 'a', addedAt: at }, null] },
    ],
    ['no data to keep', { id: 1, at, total: 12n, priority: 2, ref: '5' }],
  ])('gives the resolvers under it %s as the resolver returned it', async (_name, value) => {
    expect(await replayOf(Receipt, value)).toStrictEqual(value);
  });

  it("gives the resolvers under a union's member its data that is no field", async () => {
    const value = { id: 1, at, openedAt: at };
    // A member is marked as the member it was stored as, as data a serializer copies too.
    expect(await replayOf(Outcome, value)).toStrictEqual({
      ...value,
      __typename: 'Receipt',
      __replayedMember: 'Receipt',
      // The __typename is the library's (taken off with the mark once resolveType() read it).
      __replayedTypename: true,
    });
  });

  it.each<[string, graphql.GraphQLOutputType, unknown, string[]]>([
    ['nothing for plain data', Receipt, { id: 1, at, createdAt: at, ref: 5 }, []],
    [
      'the methods of its class',
      Receipt,
      new Labelled(),
      [
        'a replay has it as a plain object, not as an instance of Labelled, without describe of ' +
          'its class',
      ],
    ],
    [
      'a function that is no field',
      Receipt,
      { id: 1, onPaid: () => 1 },
      ['its data onPaid (a function) does not come back as it was'],
    ],
    [
      'a stream that is no field',
      Receipt,
      { id: 1, body: Readable.from(['x']) },
      ['its data body (a stream) does not come back as it was'],
    ],
    [
      'a field that is a method',
      Receipt,
      { id: 1, label: () => 'x' },
      [
        "its field label is a method of the value, which GraphQL calls with the field's " +
          'arguments: a replay has no value for it',
      ],
    ],
    [
      "a field's value that neither its scalar nor typed JSON gives back",
      Receipt,
      { id: 1, price: new Money(1250) },
      [
        "its field price (an instance of Money) comes back as its scalar Amount's parseValue() " +
          'reads it (a number)',
      ],
    ],
    [
      'a member of a union that its resolveType() cannot tell outside the answer',
      Unknowable,
      { id: 1 },
      [
        "neither its resolveType() nor its members' isTypeOf() told its member outside the " +
          'answer, so a replay has its data as JSON, and no __typename to tell the member by',
      ],
    ],
  ])('says what a replay cannot give back: %s', async (_name, type, value, what) => {
    const losses: ReplayLoss[] = [];
    await wireOf(type, value, undefined, losses);
    expect(losses.map((loss) => loss.what)).toEqual(what);
    const named = graphql.getNamedType(type).name;
    expect(losses.every((loss) => loss.type === named)).toBe(true);
  });

  it('still answers a replay of what it cannot give back, as before (through the scalar)', async () => {
    expect(await replayOf(Receipt, { id: 1, price: new Money(1250) })).toEqual({
      id: 1,
      price: 12.5,
    });
  });

  it.each<[string, number, unknown]>([
    [
      'before the typed form (format 1): the data beside the fields, as JSON',
      1,
      { id: 1, at, ownerId: 7, createdAt: at.toISOString(), [KEPT]: { json: { x: 1 } } },
    ],
    [
      'in the typed form (format 2)',
      2,
      { id: 1, at, ownerId: 7, createdAt: at.toISOString(), x: 1 },
    ],
  ])('reads a value stored %s', (_name, format, value) => {
    const stored = {
      id: 1,
      at: at.toISOString(),
      ownerId: 7,
      createdAt: at.toISOString(),
      [KEPT]: { json: { x: 1 } },
    };
    expect(fromWire(graphql, schema, Receipt, stored, format)).toStrictEqual(value);
  });

  it("stores a union's member by the union's resolveType(), and replays it by that", async () => {
    const value = { id: 1, at, reminders: [at] };
    const stored = JSON.parse(JSON.stringify(await wireOf(Outcome, value))) as unknown;
    expect(stored).toEqual({
      id: 1,
      at: at.toISOString(),
      reminders: [at.toISOString()],
      __typename: 'Receipt',
    });
    expect(fromWire(graphql, schema, Outcome, stored)).toEqual({
      ...value,
      __typename: 'Receipt',
      __replayedMember: 'Receipt',
      // The __typename is the library's (taken off with the mark once resolveType() read it).
      __replayedTypename: true,
    });
  });

  it('refuses to store a value its scalar refuses', async () => {
    await expect(wireOf(Receipt, { id: 1, total: '12' })).rejects.toThrow('not a bigint');
  });
});

describe('argumentsWire', () => {
  const at = new Date('2026-03-01T09:30:00.000Z');
  it.each([
    ['a Date', { at }, { at: DateTime }, { at: at.toISOString() }],
    ['an enum by its name', { p: 2 }, { p: Priority }, { p: 'High' }],
    [
      'an input object with a Date, without a prototype',
      { w: Object.assign(Object.create(null) as object, { from: at, note: 'x' }) },
      { w: Window },
      { w: { from: at.toISOString(), note: 'x' } },
    ],
    [
      'a Date its scalar serializes to the Date (graphql-scalars), as JSON writes it (adversary 74)',
      { at },
      { at: DateTimeAsDate },
      { at: at.toISOString() },
    ],
    ['a list', { ids: [1, 2] }, { ids: new GraphQLList(GraphQLInt) }, { ids: [1, 2] }],
    [
      'an untyped plain value',
      { extra: { a: [1, 'b', null] } },
      {},
      { extra: { a: [1, 'b', null] } },
    ],
  ])('takes %s in its wire form', (_name, args, types, wire) => {
    expect(argumentsWire(graphql, types, args)).toEqual(wire);
  });

  it.each([
    [
      'an Upload',
      { file: Promise.resolve({}) },
      { file: Upload },
      'a Promise (an upload, say) that the scalar Upload cannot write',
    ],
    ['a Promise', { file: Promise.resolve({}) }, {}, 'a Promise'],
    ['a stream', { file: Readable.from(['x']) }, {}, 'a stream'],
    ['a Buffer', { bytes: Buffer.from('x') }, {}, 'a Buffer'],
    ['a class instance', { when: new Labelled() }, {}, 'an instance of Labelled'],
    ['a bigint', { n: 1n }, {}, 'a BigInt'],
    [
      'a Buffer a scalar hands on, though it has a toJSON()',
      { bytes: Buffer.from('x') },
      { bytes: Passthrough },
      'a Buffer',
    ],
    [
      'a class instance a scalar hands on, without a toJSON()',
      { when: new Labelled() },
      { when: Passthrough },
      'an instance of Labelled',
    ],
    [
      'a Buffer under an input object',
      { w: { note: Buffer.from('x') } },
      { w: Window },
      'w.note is a Buffer',
    ],
  ])('refuses %s', (_name, args, types, what) => {
    expect(() => argumentsWire(graphql, types, args)).toThrow(NotJsonArgumentError);
    expect(() => argumentsWire(graphql, types, args)).toThrow(what);
  });

  it.each([
    [
      'an Invalid Date (a mistyped date the scalar parsed)',
      { at: new Date('2026-02-30 soon') },
      { at: DateTime },
      'the argument at is not a valid value of its type DateTime (Invalid time value)',
    ],
    [
      'a string its scalar refuses, under an input object',
      { w: { cents: '12' } },
      { w: new GraphQLInputObjectType({ name: 'Paid', fields: { cents: { type: Cents } } }) },
      'the argument w.cents is not a valid value of its type Cents (not a bigint)',
    ],
  ])('refuses %s as not valid for its type', (_name, args, types, message) => {
    expect(() => argumentsWire(graphql, types, args)).toThrow(ArgumentValueInvalidError);
    expect(() => argumentsWire(graphql, types, args)).toThrow(message);
  });
});

describe('strictJson', () => {
  it.each([[null], ['a'], [1.5], [true], [[1, { a: 'b' }]], [{ a: { b: [null] } }]])(
    'keeps %j',
    (value) => {
      expect(strictJson(value, 'x')).toEqual(value);
    },
  );

  it('keeps a member named __proto__ as data, as JSON and GraphQL literals have it (adversary 69)', () => {
    const value = JSON.parse('{"note":"y","__proto__":{"role":"admin"}}') as object;
    const copy = strictJson(value, 'x') as object;
    expect(Object.getPrototypeOf(copy)).toBe(Object.prototype);
    expect(Object.keys(copy)).toEqual(['note', '__proto__']);
    expect(JSON.stringify(copy)).toBe('{"note":"y","__proto__":{"role":"admin"}}');
  });

  it.each([[Infinity], [NaN], [undefined], [() => 1], [new Date(0)], [new Map()]])(
    'refuses %p',
    (value) => {
      expect(() => strictJson(value, 'x')).toThrow(NotJsonArgumentError);
    },
  );
});

describe('outputWire, as far as the selection reads', () => {
  const Author: graphql.GraphQLObjectType = new GraphQLObjectType({
    name: 'Author',
    fields: () => ({ name: { type: GraphQLString }, books: { type: new GraphQLList(Book) } }),
  });
  const Book: graphql.GraphQLObjectType = new GraphQLObjectType({
    name: 'Book',
    fields: () => ({
      id: { type: GraphQLInt },
      title: { type: GraphQLString },
      body: { type: GraphQLString },
      author: { type: Author },
      tags: { type: new GraphQLList(GraphQLString) },
      blurb: { type: GraphQLString },
    }),
  });
  /** A book whose author lists it (a back-reference), with what must not be read unselected. */
  const cyclic = () => {
    const author = { name: 'Ursula', books: [] as unknown[] };
    const book = {
      id: 1,
      title: 'Earthsea',
      body: 'x'.repeat(1_000_000),
      author,
      get blurb(): string {
        throw new Error('an unselected getter was called');
      },
      tags: {
        then() {
          throw new Error('an unselected Promise was awaited');
        },
      },
    };
    author.books.push(book);
    return book;
  };
  const books = new GraphQLSchema({
    query: new GraphQLObjectType({ name: 'Query', fields: { book: { type: Book } } }),
  });
  const walk = async (value: unknown, set: string, type: graphql.GraphQLOutputType = Book) =>
    outputWireApart(graphql, books, type, value, selecting(set), call);

  it.each<[string, string, unknown]>([
    ['the selected fields only', '{ id title }', { id: 1, title: 'Earthsea' }],
    [
      'a value that links back, as deep as the selection',
      '{ id author { name books { id author { name } } } }',
      { id: 1, author: { name: 'Ursula', books: [{ id: 1, author: { name: 'Ursula' } }] } },
    ],
    [
      'a field selected under two aliases once, by its name, with both sub-selections',
      '{ a: author { name } b: author { books { title } } }',
      { author: { name: 'Ursula', books: [{ title: 'Earthsea' }] } },
    ],
    [
      'a fragment and @skip as GraphQL reads them',
      '{ ...on Book { id } title @skip(if: true) }',
      { id: 1 },
    ],
  ])('stores %s', async (_name, set, wire) => {
    expect((await walk(cyclic(), set)).wire).toEqual(wire);
  });

  it('stores a selected field that the value has not as null, not as not selected', async () => {
    expect((await walk({ id: 1 }, '{ id title }')).wire).toEqual({ id: 1, title: null });
  });

  it('reads a one-shot list once, and gives the first answer the list it read', async () => {
    const rows = [{ id: 1 }, { id: 2 }];
    const tags = ['a', 'b'].values();
    const value = { id: 3, tags, author: { name: 'U', books: rows.values() } };
    const stored = await walk(value, '{ tags author { books { id } } }');
    expect(stored.wire).toEqual({ tags: ['a', 'b'], author: { books: [{ id: 1 }, { id: 2 }] } });
    const first = stored.value as typeof value & { tags: string[] };
    expect(first).toMatchObject({ id: 3, tags: ['a', 'b'], author: { books: rows } });
    // The resolver's value itself is not changed: the answer is it, seen through a Proxy that
    // gives the lists as read; its class and own keys its own (a serializer copies those).
    expect(Object.getPrototypeOf(first)).toBe(Object.getPrototypeOf(value));
    expect(Object.keys(first)).toEqual(['id', 'tags', 'author']);
    expect(value.tags).toBe(tags);
    const list = await walk(rows.values(), '{ id }', new GraphQLList(Book));
    expect(list.value).toEqual(rows);
  });

  it.each([
    ['a getter that signs afresh', false],
    ['a getter that fails once', true],
  ])('gives the first answer what %s gave the store, never read again', async (_name, fails) => {
    let reads = 0;
    class Receipt {
      id = 1;
      get title(): string {
        reads += 1;
        if (fails && reads === 1) throw new Error('signing service unavailable');
        return `signed-${reads}`;
      }
    }
    const value = new Receipt();
    const stored = await walk(value, '{ id title }');
    const first = stored.value as Receipt;
    expect(first).toBeInstanceOf(Receipt);
    if (fails) {
      expect(() => first.title).toThrow('signing service unavailable');
    } else {
      expect(stored.wire).toMatchObject({ id: 1, title: 'signed-1' });
      expect(first.title).toBe('signed-1');
    }
    // Not enumerable, as the getter was not: a serializer's copy leaves it out as before.
    expect(Object.keys(first)).toEqual(['id']);
    expect(reads).toBe(1);
  });

  it("gives the first answer the resolver's own value when no list was read", async () => {
    const value = cyclic();
    expect((await walk(value, '{ id author { books { id } } }')).value).toBe(value);
  });

  it('keeps the unselected data of an object whose @ResolveField() is selected', async () => {
    const Invoice = new GraphQLObjectType({
      name: 'WireInvoice',
      fields: {
        id: { type: GraphQLInt },
        total: { type: GraphQLInt },
        due: { type: GraphQLInt },
        memo: { type: GraphQLString },
      },
    });
    noteResolvedField('WireInvoice.due');
    const value = {
      id: 1,
      total: 5,
      get memo(): string {
        throw new Error('a getter is not data');
      },
    };
    const stored = await outputWireApart(
      graphql,
      schema,
      Invoice,
      value,
      selecting('{ id due }'),
      call,
    );
    const replayed = fromWire(graphql, schema, Invoice, JSON.parse(JSON.stringify(stored.wire)));
    // Its `due` is the app's resolver's, from the parent, which has none: a replay makes none up.
    expect(replayed).toEqual({ id: 1, total: 5 });
  });

  describe("one graph for an answer's parents (adversary 105: a back-reference)", () => {
    const Line = new GraphQLObjectType({
      name: 'WireSharedLine',
      fields: { id: { type: GraphQLInt }, subtotal: { type: GraphQLInt } },
    });
    const Order = new GraphQLObjectType({
      name: 'WireSharedOrder',
      fields: { id: { type: GraphQLInt }, lines: { type: new GraphQLList(Line) } },
    });
    noteResolvedField('WireSharedLine.subtotal');
    type Row = { id: number; qty: number; unitPrice: number; order?: unknown };
    /** An order whose lines each point back at it, as an ORM loads both sides. */
    const orderOf = (n: number, backRef: boolean) => {
      const order = { id: 1, lines: [] as Row[] };
      for (let i = 1; i <= n; i += 1) {
        order.lines.push({ id: i, qty: 2, unitPrice: i, ...(backRef ? { order } : {}) });
      }
      return order;
    };
    const store = (n: number, backRef: boolean) =>
      outputWire(
        graphql,
        schema,
        Order,
        orderOf(n, backRef),
        selecting('{ id lines { id subtotal } }'),
        call,
      );
    /** What the stored answer takes: its wire and its parents' graph. */
    const bytes = (stored: { wire: unknown; parentGraph?: Graph }) =>
      JSON.stringify(stored.wire).length + JSON.stringify(stored.parentGraph ?? null).length;

    it.each<[string, boolean]>([
      ['without a back-reference', false],
      ['with every line pointing back at the order', true],
    ])('%s: grows with the lines, not their square', async (_name, backRef) => {
      const ratio = bytes(await store(80, backRef)) / bytes(await store(40, backRef));
      expect(ratio).toBeLessThan(2.2);
    });

    it("names each parent's node of the one graph, stored beside the answer", async () => {
      const stored = await store(3, true);
      const wire = stored.wire as { lines: Record<string, unknown>[] };
      const nodes = wire.lines.map((line) => parentRefIndex(line[PARENT]));
      expect(nodes.every((node) => node !== undefined)).toBe(true);
      expect(new Set(nodes).size).toBe(3);
      expect(stored.parents).toEqual(wire.lines);
      // The order, its list of lines and each line: once each, with each line's own data.
      expect(stored.parentGraph!.g.filter((node) => (node as unknown[])[0] === 'a')).toHaveLength(
        1,
      );
    });

    it('gives every replayed parent the same shared objects, read once, as the first call had', async () => {
      const stored = await store(3, true);
      const json = JSON.parse(
        JSON.stringify({ wire: stored.wire, parentGraph: stored.parentGraph }),
      ) as { wire: unknown; parentGraph: Graph };
      const replayed = fromWire(
        graphql,
        schema,
        Order,
        json.wire,
        undefined,
        undefined,
        undefined,
        namedReader(json.parentGraph),
      ) as { lines: Row[] };
      const [first, second] = replayed.lines;
      expect({ qty: first.qty, unitPrice: second.unitPrice }).toEqual({ qty: 2, unitPrice: 2 });
      // One order, as at the first call: every line's `order` the same object, its lines' data.
      expect(first.order).toBe(second.order);
      const order = first.order as { lines: Row[] };
      expect(order.lines[2]).toEqual({ id: 3, qty: 2, unitPrice: 3, order });
    });

    describe("one object at several places (adversary 109: a DataLoader's cached entity)", () => {
      const Cart = new GraphQLObjectType({
        name: 'WirePlacesCart',
        fields: { primary: { type: Line }, lines: { type: new GraphQLList(Line) } },
      });
      const row = { id: 7, qty: 2, unitPrice: 3, note: 'n'.repeat(1_000) };
      const cart = { primary: row, lines: [row, row, row] };
      it.each<[string, string, number]>([
        [
          'the same selection at every place: one node, each place naming it',
          '{ lines { id subtotal } }',
          1,
        ],
        [
          'the primary too, selected alike: still one',
          '{ primary { id subtotal } lines { id subtotal } }',
          1,
        ],
        [
          // The primary's record lacks `id` (selected, in the answer): its own node.
          'selections that differ: a node per record its places hold',
          '{ primary { id subtotal } lines { subtotal } }',
          2,
        ],
      ])('%s', async (_name, query, records) => {
        const stored = await outputWire(graphql, schema, Cart, cart, selecting(query), call);
        const wire = stored.wire as {
          primary?: Record<string, unknown>;
          lines: Record<string, unknown>[];
        };
        const places = [...(wire.primary ? [wire.primary] : []), ...wire.lines];
        const nodes = places.map((place) => parentRefIndex(place[PARENT]));
        expect(nodes.every((node) => node !== undefined)).toBe(true);
        expect(new Set(nodes).size).toBe(records);
        // Its data is stored once per record, never once per place.
        expect(JSON.stringify(stored.parentGraph).split(row.note).length - 1).toBe(records);
        const json = JSON.parse(
          JSON.stringify({ wire: stored.wire, parentGraph: stored.parentGraph }),
        ) as { wire: unknown; parentGraph: Graph };
        const replayed = fromWire(
          graphql,
          schema,
          Cart,
          json.wire,
          undefined,
          undefined,
          undefined,
          namedReader(json.parentGraph),
        ) as { primary?: Row; lines: Row[] };
        // Every place's resolvers read the object's data, as at the first call.
        for (const place of [...(wire.primary ? [replayed.primary] : []), ...replayed.lines]) {
          expect(place).toMatchObject({ qty: 2, unitPrice: 3, note: row.note });
        }
      });
    });

    it('reads no data for a parent where the answer holds no graph (never throws)', () => {
      const replayed = fromWire(graphql, schema, Line, { id: 1, [PARENT]: { p: 4 } });
      expect(replayed).toEqual({ id: 1 });
    });
  });

  it("keeps, for a @ResolveField() the first call did not select, the parent's data beyond the answer (adversary 90)", async () => {
    const Contact = new GraphQLObjectType({
      name: 'WireParentContact',
      fields: { phone: { type: GraphQLString }, email: { type: GraphQLString } },
    });
    const Customer = new GraphQLObjectType({
      name: 'WireParentCustomer',
      fields: {
        name: { type: GraphQLString },
        contact: { type: Contact },
        domain: { type: GraphQLString },
        notes: { type: GraphQLString },
      },
    });
    noteResolvedField('WireParentCustomer.domain');
    const value = { name: 'Ada', contact: { phone: '555', email: 'ada@example.org' }, notes: 'n' };
    const stored = await outputWireApart(
      graphql,
      schema,
      Customer,
      value,
      selecting('{ name contact { phone } }'),
      call,
    );
    const replayed = fromWire(graphql, schema, Customer, JSON.parse(JSON.stringify(stored.wire)));
    expect(replayed).toEqual(value);
  });

  it('stores a value whose parent data holds a cycle through class instances (adversary 90)', async () => {
    class Node {
      constructor(public next?: Node) {}
    }
    const Thing = new GraphQLObjectType({
      name: 'WireParentThing',
      fields: {
        id: { type: GraphQLInt },
        label: { type: GraphQLString },
        node: { type: GraphQLString },
      },
    });
    noteResolvedField('WireParentThing.label');
    const node = new Node();
    node.next = new Node(node);
    const losses: ReplayLoss[] = [];
    const stored = await outputWireApart(
      graphql,
      schema,
      Thing,
      { id: 1, node },
      selecting('{ id }'),
      call,
      losses,
    );
    expect((stored.wire as Record<string, unknown>).id).toBe(1);
  });

  describe('the own keys of a parent its @ResolveField() reads, in their order (adversary 101)', () => {
    const Article = new GraphQLObjectType({
      name: 'WireOrderedArticle',
      fields: {
        id: { type: GraphQLInt },
        title: { type: GraphQLString },
        body: { type: GraphQLString },
        etag: { type: GraphQLString },
      },
    });
    noteResolvedField('WireOrderedArticle.etag');
    const replayOf = async (value: object, set: string) => {
      const stored = await outputWireApart(graphql, schema, Article, value, selecting(set), call);
      const wire = JSON.parse(JSON.stringify(stored.wire)) as Record<string, unknown>;
      return { wire, replayed: fromWire(graphql, schema, Article, wire) as object };
    };

    it.each([
      [
        'a row selected in another order',
        { id: 2, title: 'Hello', body: 'World' },
        '{ id body etag }',
      ],
      [
        'its fields selected backwards',
        { id: 2, title: 'Hello', body: 'World' },
        '{ body title id etag }',
      ],
      ['data beside the fields first', { note: 'n', id: 2, body: 'World' }, '{ id body etag }'],
      [
        "a JSON document's own __proto__, prototype and constructor",
        JSON.parse(
          '{"title":"t","__proto__":{"role":"admin"},"prototype":2,"constructor":{"a":1},"id":6}',
        ) as object,
        '{ id etag }',
      ],
    ])('%s: the same own keys, in the same order', async (_what, value, set) => {
      const { replayed } = await replayOf(value, set);
      expect(Object.keys(replayed)).toEqual(Object.keys(value));
      expect(JSON.stringify(replayed)).toBe(JSON.stringify(value));
      expect(Object.getPrototypeOf(replayed)).toBe(Object.prototype);
    });

    it('stores no order where the replay rebuilds the same one', async () => {
      const { wire } = await replayOf(
        { id: 2, title: 'Hello', body: 'World' },
        '{ id title body etag }',
      );
      expect(wire).not.toHaveProperty([KEYS]);
    });

    it('replays a record stored before the order was in its rebuilt order (best effort)', () => {
      const wire = { id: 2, body: 'World', [PARENT]: { json: { title: 'Hello' } } };
      const replayed = fromWire(graphql, schema, Article, wire);
      expect(Object.keys(replayed as object)).toEqual(['id', 'body', 'title']);
    });
  });

  describe('a selected field the object did not have, on a parent its @ResolveField() reads (adversary 109)', () => {
    const Article = new GraphQLObjectType({
      name: 'WireAbsentArticle',
      fields: {
        id: { type: GraphQLInt },
        title: { type: GraphQLString },
        subtitle: { type: GraphQLString },
        etag: { type: GraphQLString },
      },
    });
    const Plain = new GraphQLObjectType({
      name: 'WireAbsentPlain',
      fields: { id: { type: GraphQLInt }, subtitle: { type: GraphQLString } },
    });
    noteResolvedField('WireAbsentArticle.etag');
    const storedOf = async (type: GraphQLObjectType, value: object, set: string) => {
      const stored = await outputWireApart(graphql, schema, type, value, selecting(set), call);
      return JSON.parse(JSON.stringify(stored.wire)) as Record<string, unknown>;
    };

    it.each<[string, object, string[]]>([
      ['without the key: none on the replay', { id: 2, title: 'Hello' }, ['id', 'title']],
      [
        'there as null: there on the replay',
        { id: 2, title: 'Hello', subtitle: null },
        ['id', 'title', 'subtitle'],
      ],
      [
        'there as undefined: there on the replay',
        { id: 2, subtitle: undefined },
        ['id', 'subtitle'],
      ],
    ])('%s', async (_what, value, keys) => {
      const wire = await storedOf(Article, value, '{ id subtitle etag }');
      expect(wire.subtitle).toBeNull();
      const replayed = fromWire(
        graphql,
        schema,
        Article,
        wire,
        undefined,
        selecting('{ id subtitle etag }'),
      );
      expect(Object.keys(replayed as object)).toEqual(keys);
      expect('subtitle' in (replayed as object)).toBe(keys.includes('subtitle'));
      expect(JSON.stringify(replayed)).toBe(JSON.stringify(value));
    });

    it('answers it null on a replay, as at first', async () => {
      const wire = await storedOf(Article, { id: 2, title: 'Hello' }, '{ id subtitle }');
      const replaySchema = new GraphQLSchema({
        query: new GraphQLObjectType({
          name: 'Query',
          fields: {
            article: { type: Article, resolve: () => fromWire(graphql, schema, Article, wire) },
          },
        }),
      });
      const result = await graphql.graphql({
        schema: replaySchema,
        source: '{ article { id subtitle } }',
      });
      expect(result).toEqual({ data: { article: { id: 2, subtitle: null } } });
    });

    it('notes nothing where nothing of the app reads the object', async () => {
      const wire = await storedOf(Plain, { id: 2 }, '{ id subtitle }');
      expect(wire).toEqual({ id: 2, subtitle: null });
    });

    it('replays a record stored before it was noted with the null, as it always did', () => {
      const replayed = fromWire(graphql, schema, Article, { id: 2, subtitle: null });
      expect(Object.keys(replayed as object)).toEqual(['id', 'subtitle']);
    });
  });

  describe('an object without a prototype (adversary 109)', () => {
    const Tag = new GraphQLObjectType({
      name: 'WireBareTag',
      fields: {
        id: { type: GraphQLInt },
        name: { type: GraphQLString },
        audit: { type: GraphQLString },
      },
    });
    noteResolvedField('WireBareTag.audit');
    const bare = (members: object) => Object.assign(Object.create(null) as object, members);

    it.each<[string, () => object, string, object | null]>([
      ['its fields only', () => bare({ id: 2, name: 'urgent' }), '{ id name }', null],
      [
        'its data beside them, for a resolver',
        () => bare({ id: 2, name: 'urgent' }),
        '{ id audit }',
        null,
      ],
      [
        'a plain one stays plain',
        () => ({ id: 2, name: 'urgent' }),
        '{ id audit }',
        Object.prototype,
      ],
    ])('%s: replayed with the prototype it had', async (_what, make, set, prototype) => {
      const value = make();
      const stored = await outputWireApart(graphql, schema, Tag, value, selecting(set), call);
      const wire = JSON.parse(JSON.stringify(stored.wire)) as Record<string, unknown>;
      const replayed = fromWire(graphql, schema, Tag, wire) as object;
      expect(Object.getPrototypeOf(replayed)).toBe(prototype);
      expect({ ...replayed }).toEqual({ ...value });
    });

    it('replays a record stored before it was said plain, as it always did', () => {
      const replayed = fromWire(graphql, schema, Tag, { id: 2, name: 'urgent' }) as object;
      expect(Object.getPrototypeOf(replayed)).toBe(Object.prototype);
    });

    describe('a parent adopted as its own node (line.order.lines[i])', () => {
      const Line = new GraphQLObjectType({
        name: 'WireBareLine',
        fields: { id: { type: GraphQLInt }, subtotal: { type: GraphQLInt } },
      });
      const Order = new GraphQLObjectType({
        name: 'WireBareOrder',
        fields: { id: { type: GraphQLInt }, lines: { type: new GraphQLList(Line) } },
      });
      noteResolvedField('WireBareLine.subtotal');
      const replayOf = async (forget: boolean) => {
        const order = { id: 1, lines: [] as object[] };
        for (const id of [1, 2]) order.lines.push(bare({ id, qty: 2, order }));
        const stored = await outputWire(
          graphql,
          schema,
          Order,
          order,
          selecting('{ id lines { id subtotal } }'),
          call,
        );
        const json = JSON.parse(
          JSON.stringify({ wire: stored.wire, parentGraph: stored.parentGraph }),
        ) as { wire: { lines: Record<string, unknown>[] }; parentGraph: Graph };
        // A record stored before an object said it had no prototype.
        if (forget) for (const line of json.wire.lines) delete line[INSTANCE];
        const replayed = fromWire(
          graphql,
          schema,
          Order,
          json.wire,
          undefined,
          undefined,
          undefined,
          namedReader(json.parentGraph),
        ) as { lines: { order: { lines: object[] } }[] };
        return replayed.lines;
      };

      it.each<[string, boolean]>([
        ['said so', false],
        ['a record that did not say (the node keeps its own)', true],
      ])('%s: the very node, without a prototype', async (_what, forget) => {
        const lines = await replayOf(forget);
        for (const [i, line] of lines.entries()) {
          expect(Object.getPrototypeOf(line)).toBeNull();
          expect(line.order.lines.indexOf(line)).toBe(i);
        }
      });
    });
  });

  it("keeps a @ResolveField()'s input from its parent as it is, not as the field's type", async () => {
    const Status = new GraphQLEnumType({
      name: 'WireStatus',
      values: { PENDING: {}, SHIPPED: {} },
    });
    const Order = new GraphQLObjectType({
      name: 'WireRawOrder',
      fields: { id: { type: GraphQLID }, status: { type: Status } },
    });
    noteResolvedField('WireRawOrder.id');
    noteResolvedField('WireRawOrder.status');
    // Raw columns its resolvers map (toUpperCase(), toString()): the types would refuse them.
    const value = { id: 2n, status: 'pending' };
    const stored = await outputWireApart(
      graphql,
      schema,
      Order,
      value,
      selecting('{ id status }'),
      call,
    );
    const replayed = fromWire(graphql, schema, Order, JSON.parse(JSON.stringify(stored.wire)));
    expect(replayed).toEqual({ id: 2n, status: 'pending' });
  });

  it.each([
    ['a Promise that rejects', () => ({ id: 1, memo: Promise.reject(new Error('signer down')) })],
    [
      'a getter that throws',
      () => ({
        id: 1,
        get memo(): string {
          throw new Error('signer down');
        },
      }),
    ],
  ])(
    "stores a selected field's failed read (%s) as its error, thrown again",
    async (...[label, make]) => {
      const Profile = new GraphQLObjectType({
        name: 'WireProfile',
        fields: { id: { type: GraphQLInt }, memo: { type: GraphQLString } },
      });
      const stored = await outputWireApart(
        graphql,
        schema,
        Profile,
        make(),
        selecting('{ id memo }'),
        call,
      );
      const replayed = fromWire(
        graphql,
        schema,
        Profile,
        JSON.parse(JSON.stringify(stored.wire)),
      ) as {
        id: number;
        memo: unknown;
      };
      expect(replayed.id).toBe(1);
      // As it failed: a Promise that rejects (an own key a serializer copies), or a getter
      // that throws (not an own key one copies).
      if (label === 'a Promise that rejects') {
        await expect(replayed.memo).rejects.toThrow('signer down');
        expect(Object.keys(replayed)).toContain('memo');
      } else {
        expect(() => replayed.memo).toThrow('signer down');
        expect(Object.keys(replayed)).not.toContain('memo');
      }
    },
  );

  it('refuses, on a replay, a field the first call did not select', async () => {
    const stored = JSON.parse(JSON.stringify((await walk(cyclic(), '{ id }')).wire)) as unknown;
    const replayed = fromWire(graphql, schema, Book, stored) as Record<string, unknown>;
    expect(replayed.id).toBe(1);
    expect(() => replayed.title).toThrow(notStoredFieldMessage('Book', 'title'));
    expect(() => replayed.title).toThrow(
      expect.objectContaining({ extensions: { code: FIELD_NOT_STORED } }) as Error,
    );
    // Stored before answers were stored by their selection: the type's every field was.
    expect((fromWire(graphql, schema, Book, stored, 2) as { title?: unknown }).title).toBe(
      undefined,
    );
  });

  it("answers the refusal in GraphQL as the field's error, the field null", async () => {
    const stored = JSON.parse(JSON.stringify((await walk(cyclic(), '{ id }')).wire)) as unknown;
    const replaySchema = new GraphQLSchema({
      query: new GraphQLObjectType({
        name: 'Query',
        fields: { book: { type: Book, resolve: () => fromWire(graphql, schema, Book, stored) } },
      }),
    });
    const result = await graphql.graphql({
      schema: replaySchema,
      source: '{ book { id title } }',
    });
    expect(result.data).toEqual({ book: { id: 1, title: null } });
    expect(result.errors?.map((error) => [error.path, error.extensions.code])).toEqual([
      [['book', 'title'], FIELD_NOT_STORED],
    ]);
  });
});

describe('outputWire and fromWire, a field behind Nest field middleware', () => {
  /** Nest's resolver of a `@Field({ middleware })`, made by the installed Nest's factory. */
  let behindMiddleware: graphql.GraphQLFieldResolver<unknown, unknown>;
  const Status = new GraphQLEnumType({ name: 'MwStatus', values: { PENDING: {}, SHIPPED: {} } });
  let Transfer: GraphQLObjectType;

  beforeAll(async () => {
    await loadNestReaders(graphql);
    const factory = (await import(
      '@nestjs/graphql/dist/schema-builder/factories/object-type-definition.factory.js' as string
    )) as {
      ObjectTypeDefinitionFactory: {
        prototype: {
          createFieldResolver(field: object, options: object): typeof behindMiddleware;
        };
      };
    };
    behindMiddleware = factory.ObjectTypeDefinitionFactory.prototype.createFieldResolver(
      { name: 'label', options: {}, middleware: [(_ctx: unknown, next: () => unknown) => next()] },
      {},
    );
    Transfer = new GraphQLObjectType({
      name: 'MwTransfer',
      fields: {
        id: { type: GraphQLInt },
        visibility: { type: GraphQLString },
        // Nest's wrapper itself (the schema's resolve is what is told apart).
        label: { type: new GraphQLNonNull(GraphQLString), resolve: behindMiddleware },
        status: { type: Status, resolve: behindMiddleware },
      },
    });
  });

  it('its input is never read nor stored: the answer stores its output (middleware-outputs.ts)', async () => {
    let reads = 0;
    const value = Object.assign(
      Object.create({
        get label() {
          reads += 1;
          return 'Transfer 1';
        },
      }) as object,
      { id: 1, visibility: 'private' },
    );
    const stored = await outputWireApart(
      graphql,
      schema,
      Transfer,
      value,
      selecting('{ id label }'),
      call,
    );
    expect(reads).toBe(0);
    const wire = JSON.parse(JSON.stringify(stored.wire)) as Record<string, unknown>;
    expect(wire).toEqual({ id: 1 });
    const replayed = fromWire(
      graphql,
      schema,
      Transfer,
      wire,
      undefined,
      selecting('{ id label }'),
    );
    // No value, and no refusal: the replay's wrapper of the field answers its stored output.
    expect(Object.getOwnPropertyDescriptor(replayed, 'label')).toBeUndefined();
  });
});

describe('fromWire and outputWire, fields renamed with @Field({ name }) (adversary 100)', () => {
  // Nest reads a field only by its class property: its schema name is its name on the wire.
  @NestObjectType('PlacesSwapped')
  class Swapped {
    @NestField({ name: 'b' }) a!: string;
    @NestField({ name: 'a' }) b!: string;
  }
  @NestObjectType('PlacesChain')
  class Chain {
    @NestField({ name: 'y' }) x!: string;
    @NestField({ name: 'z' }) y!: string;
    @NestField({ name: 'w' }) z!: string;
  }
  @NestObjectType('PlacesHidden')
  class Hidden {
    id!: number;
    @NestField(() => NestID, { name: 'id' }) uuid!: string;
  }
  @NestObjectType('PlacesResolved')
  class Resolved {
    @NestField({ name: 'label' }) title!: string;
  }
  @NestObjectType('PlacesPriced')
  class Priced {
    @NestField() id!: string;
    /** A column exposed as `price`, which a `@ResolveField('price')` formats (adversary 101). */
    @NestField({ name: 'price' }) priceCents!: string;
  }
  @NestObjectType('PlacesPlain')
  class Plain {
    @NestField() title!: string;
    note!: string;
  }
  const strings = (...names: string[]) =>
    Object.fromEntries(names.map((name) => [name, { type: GraphQLString }]));
  const types: Record<string, GraphQLObjectType> = {
    Swapped: new GraphQLObjectType({ name: 'PlacesSwapped', fields: strings('a', 'b') }),
    Chain: new GraphQLObjectType({ name: 'PlacesChain', fields: strings('y', 'z', 'w') }),
    Hidden: new GraphQLObjectType({ name: 'PlacesHidden', fields: { id: { type: GraphQLID } } }),
    // `title` is the app's @ResolveField() of the type, named as `label`'s property.
    Resolved: new GraphQLObjectType({ name: 'PlacesResolved', fields: strings('label', 'title') }),
    Plain: new GraphQLObjectType({ name: 'PlacesPlain', fields: strings('title') }),
    // `price` is the app's @ResolveField() of the type, over the property `priceCents`.
    Priced: new GraphQLObjectType({ name: 'PlacesPriced', fields: strings('id', 'price') }),
  };

  beforeAll(async () => {
    const storages = (await import(
      '@nestjs/graphql/dist/schema-builder/storages/lazy-metadata.storage.js' as string
    )) as { LazyMetadataStorage: { load(types?: unknown[]): void } };
    const classes = [Swapped, Chain, Hidden, Resolved, Plain, Priced];
    storages.LazyMetadataStorage.load(classes);
    NestTypeMetadataStorage.compile();
    await loadNestFields();
    noteResolvedField('PlacesResolved.title');
    noteResolvedField('PlacesPriced.price');
  });

  it.each<[string, string, object, string, Record<string, unknown>]>([
    [
      'a swapped pair',
      'Swapped',
      { a: 'from-a', b: 'from-b' },
      '{ a b }',
      { a: 'from-a', b: 'from-b' },
    ],
    [
      'a swapped pair, one selected',
      'Swapped',
      { a: 'from-a', b: 'from-b' },
      '{ b }',
      { a: 'from-a' },
    ],
    [
      'a chain of three renames',
      'Chain',
      { x: 'from-x', y: 'from-y', z: 'from-z' },
      '{ y z w }',
      { x: 'from-x', y: 'from-y', z: 'from-z' },
    ],
    [
      'renamed onto a hidden property',
      'Hidden',
      { id: 7, uuid: 'u-7' },
      '{ id }',
      { id: 7, uuid: 'u-7' },
    ],
    [
      'renamed, and the app field of its property name',
      'Resolved',
      { title: 'Hello' },
      '{ label title }',
      { title: 'Hello' },
    ],
    ['unrenamed', 'Plain', { title: 'Hi', note: 'n' }, '{ title }', { title: 'Hi', note: 'n' }],
    // The app's resolver of `price` reads its input where Nest hands it: `priceCents`.
    [
      'renamed, the app field of its schema name selected',
      'Priced',
      { id: '2', priceCents: 1234 },
      '{ id price }',
      { id: '2', priceCents: 1234 },
    ],
    [
      'renamed, the app field of its schema name not selected',
      'Priced',
      { id: '2', priceCents: 1234 },
      '{ id }',
      { id: '2', priceCents: 1234 },
    ],
  ])(
    '%s: the replay holds each value at its property',
    async (_what, name, data, set, replayed) => {
      const classes: Record<string, new () => object> = {
        Swapped,
        Chain,
        Hidden,
        Resolved,
        Plain,
        Priced,
      };
      const type = types[name];
      const source = Object.assign(new classes[name](), data);
      const stored = await outputWireApart(graphql, undefined, type, source, selecting(set), call);
      const wire = JSON.parse(JSON.stringify(stored.wire)) as unknown;
      const value = fromWire(graphql, undefined, type, wire, undefined, selecting(set)) as object;
      expect({ ...value }).toEqual(replayed);
    },
  );

  it("never writes a renamed app field's stored value at its property (its resolver's input)", () => {
    const wire = { id: '2', price: '12.34', [KEPT]: { json: { price: 1234 } } };
    const value = fromWire(
      graphql,
      undefined,
      types.Priced,
      wire,
      undefined,
      selecting('{ id price }'),
    );
    expect({ ...(value as object) }).toEqual({ id: '2', priceCents: 1234 });
    const bare = fromWire(graphql, undefined, types.Priced, { id: '2', price: '12.34' });
    expect(bare).not.toHaveProperty('priceCents');
  });

  it.each<[string, Record<string, unknown>, Record<string, unknown>]>([
    // Stored before round 100: each field by its schema name, nothing beside them.
    ['a swapped pair', { a: 'from-b', b: 'from-a' }, { a: 'from-a', b: 'from-b' }],
    // Stored before round 99: a renamed field's raw data kept beside it (`__parent`).
    [
      'a swapped pair with its raw data beside',
      { a: 'from-b', b: 'from-a', [PARENT]: { json: { a: 'raw-a', b: 'raw-b' } } },
      { a: 'from-a', b: 'from-b' },
    ],
  ])('a record stored before: %s replays each value at its property', (_what, wire, replayed) => {
    const value = fromWire(
      graphql,
      undefined,
      types.Swapped,
      wire,
      undefined,
      selecting('{ a b }'),
    );
    expect({ ...(value as object) }).toEqual(replayed);
  });
});
