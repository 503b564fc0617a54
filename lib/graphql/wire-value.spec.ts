import * as graphql from 'graphql';
import {
  GraphQLEnumType,
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
import { Readable } from 'node:stream';
import {
  argumentsWire,
  fromWire,
  ArgumentValueInvalidError,
  NotJsonArgumentError,
  outputWire,
  strictJson,
} from './wire-value.js';

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
const Receipt = new GraphQLObjectType({
  name: 'Receipt',
  fields: {
    id: { type: new GraphQLNonNull(GraphQLInt) },
    at: { type: DateTime },
    total: { type: Cents },
    priority: { type: Priority },
    reminders: { type: new GraphQLList(DateTime) },
    label: { type: GraphQLString },
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
const schema = new GraphQLSchema({
  query: new GraphQLObjectType({
    name: 'Query',
    fields: { receipt: { type: Receipt }, outcome: { type: Outcome } },
  }),
});
/** What the field's resolver was given: only its context and info reach a resolveType(). */
const call = { context: {}, info: {} as graphql.GraphQLResolveInfo };

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
      "a class's getter, and its own data that is no field (for a @ResolveField())",
      new Labelled(),
      { id: 1, ownerId: 7, label: 'from a getter' },
    ],
    [
      'a field whose value is a Promise (a lazy relation), awaited',
      { id: 1, at: Promise.resolve(at), reminders: Promise.resolve([Promise.resolve(at)]) },
      { id: 1, at: at.toISOString(), reminders: [at.toISOString()] },
    ],
  ])('stores %s as GraphQL writes it', async (_name, value, wire) => {
    expect(await outputWire(graphql, schema, Receipt, value)).toEqual(wire);
  });

  it('turns a stored answer back into values that serialize to the same wire form', async () => {
    const value = { id: 1, at, total: 12n, priority: 2, reminders: [at], ownerId: 7 };
    const stored = JSON.parse(
      JSON.stringify(await outputWire(graphql, schema, Receipt, value)),
    ) as unknown;
    const replayed = fromWire(graphql, schema, Receipt, stored) as typeof value;
    expect(replayed).toEqual(value);
    expect(await outputWire(graphql, schema, Receipt, replayed)).toEqual(stored);
  });

  it("stores a union's member by the union's resolveType(), and replays it by that", async () => {
    const value = { id: 1, at, reminders: [at] };
    const stored = JSON.parse(
      JSON.stringify(await outputWire(graphql, schema, Outcome, value, call)),
    ) as unknown;
    expect(stored).toEqual({
      id: 1,
      at: at.toISOString(),
      reminders: [at.toISOString()],
      __typename: 'Receipt',
    });
    expect(fromWire(graphql, schema, Outcome, stored)).toEqual({ ...value, __typename: 'Receipt' });
  });

  it('refuses to store a value its scalar refuses', async () => {
    await expect(outputWire(graphql, schema, Receipt, { id: 1, total: '12' })).rejects.toThrow(
      'not a bigint',
    );
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

  it.each([[Infinity], [NaN], [undefined], [() => 1], [new Date(0)], [new Map()]])(
    'refuses %p',
    (value) => {
      expect(() => strictJson(value, 'x')).toThrow(NotJsonArgumentError);
    },
  );
});
