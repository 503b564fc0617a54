import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { GraphQLScalarType, Kind } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 74: a mutation with an argument of graphql-scalars' `DateTime` (the most used
 * date scalar: `import { DateTimeResolver } from 'graphql-scalars'`) is refused on every call,
 * `request_invalid` (400) "the argument at is an instance of Date, not JSON": an ordinary
 * program that can never run its mutation under a key.
 *
 * The app: a code-first resolver, `@Args('at') at: Date`, graphql-scalars' scalar mapped to
 * `Date` (`buildSchemaOptions: { scalarsMap: [{ type: Date, scalar: DateTime }] }`), the
 * scalar written here as graphql-scalars writes its `GraphQLDateTimeConfig` (typed
 * `GraphQLScalarTypeConfig<Date, Date>`): `serialize()` returns the `Date` itself, which
 * GraphQL's JSON writes as its ISO string (`toJSON()`); `parseValue()` / `parseLiteral()` give
 * a `Date`. `@Idempotent()` with the `Idempotency-Key` header, Apollo on Express.
 *
 * Why: `inputWire` (lib/graphql/wire-value.ts) takes `type.serialize(value)` as the wire form
 * and checks it with `strictJson(leafWire(serialized))`; `leafWire` turns only a `bigint` into
 * its JSON form, and `strictJson` refuses any object with a prototype: the `Date` that
 * `serialize()` gave is "an instance of Date", `NotJsonArgumentError`, refused in `readField`
 * before the key is claimed. GraphQL itself writes what `serialize()` gives through JSON
 * (`JSON.stringify`, so a `Date` is its `toJSON()`): the scalar is valid, its answers too.
 *
 * Expected (docs/guides/graphql.md, "One record per mutation field"): "Each argument counts
 * in the form GraphQL writes it: its scalar's `serialize()` (a `DateTime`'s `Date` as its
 * string ...)". Refused are values with "no JSON form ... an `Upload` ..., a stream, a
 * Promise, a `Buffer`, an instance of a class" given as the argument: a valid `DateTime` is
 * none of them. The call runs once, its retry replays.
 *
 * Control: the same mutation with the moment as a `String` argument: runs once, replays;
 * passes.
 *
 * Severity: medium (a permanent false refusal of an ordinary program: every call of such a
 * mutation answers 400, nothing runs).
 *
 * Suggested fix: take a scalar's wire form as GraphQL's JSON writes it (`leafWire`: a value
 * with a `toJSON()` written through it, as `jsonCopy` does), refusing only what still has no
 * JSON form.
 *
 * Fixed: `leafWire` (lib/graphql/wire-value.ts) writes a scalar's serialized value that has a
 * `toJSON()` (a `Date`, a Decimal, a Luxon DateTime) through JSON, as GraphQL's answer does,
 * before `strictJson`; a `Buffer` and a value without a `toJSON()` are still refused.
 */
let pool: Pool;

/** graphql-scalars' DateTime, as it is written (serialize gives the Date itself). */
const DateTime = new GraphQLScalarType<Date, Date>({
  name: 'DateTime',
  description: 'A date-time string at UTC, such as 2007-12-03T10:15:30Z.',
  serialize(value) {
    if (value instanceof Date) {
      if (!Number.isNaN(value.getTime())) return value;
      throw new TypeError('DateTime cannot represent an invalid Date instance');
    }
    if (typeof value === 'string' || typeof value === 'number') {
      const date = new Date(value);
      if (!Number.isNaN(date.getTime())) return date;
    }
    throw new TypeError(`DateTime cannot represent value: ${String(value)}`);
  },
  parseValue(value) {
    const date = new Date(value as string);
    if (typeof value !== 'string' || Number.isNaN(date.getTime())) {
      throw new TypeError(
        `DateTime cannot represent an invalid date-time-string ${String(value)}.`,
      );
    }
    return date;
  },
  parseLiteral(ast) {
    if (ast.kind !== Kind.STRING) throw new TypeError('DateTime cannot represent a non string');
    return new Date(ast.value);
  },
});

@ObjectType()
class Booking {
  @Field(() => Int)
  id!: number;

  @Field()
  at!: string;
}

@Resolver(() => Booking)
class BookingsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Booking)
  @Idempotent()
  async book(@Args('at') at: Date): Promise<Booking> {
    const { rows } = await pool.query<Booking>(
      'INSERT INTO bookings (at) VALUES ($1) RETURNING id, at::text AS at',
      [at.toISOString()],
    );
    return rows[0];
  }

  // The control: the same moment as a String argument.
  @Mutation(() => Booking)
  @Idempotent()
  async bookText(@Args('at') at: string): Promise<Booking> {
    const { rows } = await pool.query<Booking>(
      'INSERT INTO bookings (at) VALUES ($1) RETURNING id, at::text AS at',
      [at],
    );
    return rows[0];
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      // graphql-scalars' DateTime for every Date, as its docs show for Nest's code first.
      buildSchemaOptions: { scalarsMap: [{ type: Date, scalar: DateTime }] },
    }),
  ],
  providers: [BookingsResolver],
})
class BookingsModule {}

describe("adversary 74: an argument of graphql-scalars' DateTime (serialize gives a Date)", () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv74_gql_scalar_date', {
      module: BookingsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE bookings (id serial PRIMARY KEY, at timestamptz NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string, variables: Record<string, unknown>) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(JSON.stringify({ query, variables }));

  const rows = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM bookings')).rows[0].n;

  it('control: the same moment as a String argument runs once, its retry replays', async () => {
    const before = await rows();
    const query = 'mutation B($at: String!) { bookText(at: $at) { id } }';
    const first = await post('adv74-date-c', query, { at: '2026-03-01T10:00:00.000Z' });
    expect(first.body.errors).toBeUndefined();
    const again = await post('adv74-date-c', query, { at: '2026-03-01T10:00:00.000Z' });
    expect(again.body).toEqual({
      data: first.body.data,
      extensions: { idempotency: { replayed: ['bookText'] } },
    });
    expect(await rows()).toBe(before + 1);
  });

  it("graphql-scalars' DateTime argument runs once, its retry replays", async () => {
    const before = await rows();
    const query = 'mutation B($at: DateTime!) { book(at: $at) { id } }';
    const first = await post('adv74-date-a', query, { at: '2026-03-01T11:00:00.000Z' });
    // Fails: errors [{ code: 'request_invalid', "the argument at is an instance of Date, not JSON" }].
    expect(first.body.errors).toBeUndefined();
    expect(first.body.data).toEqual({ book: { id: expect.any(Number) } });
    const again = await post('adv74-date-a', query, { at: '2026-03-01T11:00:00.000Z' });
    expect(again.body).toEqual({
      data: first.body.data,
      extensions: { idempotency: { replayed: ['book'] } },
    });
    expect(await rows()).toBe(before + 1);
  });
});
