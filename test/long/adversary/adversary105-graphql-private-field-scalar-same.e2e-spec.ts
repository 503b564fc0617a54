import { jest } from '@jest/globals';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Logger, Module } from '@nestjs/common';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { GraphQLScalarType, Kind } from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07): lib/graphql/same-data.ts `sameData` never calls two values
 * the same where either `hidesState` (new, pure, walked without recursion): holds an object of
 * an app's class (or a built-in's subclass, or a Promise) with no own enumerable member,
 * whose state `isDeepStrictEqual` cannot see; one value is still the same as itself. Such a
 * field's value is then not "same" as its scalar-parsed copy, is no exact copy either
 * (`keepsExactly`: a class instance), and is named as lost in the log at the first answer.
 * The case that says so was moved before the UTC control (its assertions unchanged): the log
 * says a type's loss once per process, and the UTC control's value, hidden alike, says the
 * same line. Specs: lib/graphql/same-data.spec.ts (`sameData`, `hidesState`).
 *
 * Adversary 105 (graphql): a field's value is a value object whose state is in private class
 * fields (`#zone`, `#epochMs`: a Temporal-like `ZonedDateTime`, a DDD `Money`), written by its
 * custom scalar in a form that drops part of it (an instant as UTC ISO, without its zone). The
 * library asks whether the scalar's `parseValue()` of the stored wire form gives the resolver's
 * value back (`sameData`, i.e. `isDeepStrictEqual`), and `isDeepStrictEqual` sees no own
 * enumerable data on either object (private fields are invisible to it) and says "same". So the
 * field's value is neither kept nor named as a loss: on a replay the `@ResolveField()` reading
 * `parent.startsAt.zone` gets the parsed UTC value and answers `"UTC"` where the first answer
 * said `"Europe/Paris"`, and the app's log says nothing (with public fields instead, the
 * mutation's first answer logs "cannot be replayed as it was").
 *
 * User code: `class Zoned { #epochMs; #zone; get zone(); toInstant() }`; a scalar
 * `Instant` with `serialize: (z) => z.toInstant()` (ISO UTC) and `parseValue: (s) =>
 * Zoned.fromInstant(s)` (zone UTC); `@ObjectType() Meeting { @Field(() => Int) id;
 * @Field(() => Instant) startsAt }`; `@ResolveField(() => String) zone(@Parent() m) { return
 * m.startsAt.zone }`; `@Mutation(() => Meeting) @Idempotent() book()` returning the row with
 * `startsAt: new Zoned(ms, 'Europe/Paris')`; Apollo.
 *
 * Code path: lib/graphql/wire-value.ts (the object walk: `fromWireAgain(...)` -> `back.same`
 * -> `continue`, so `keepsExactly`/`losses` never run) -> lib/graphql/same-data.ts `sameData`
 * -> `isDeepStrictEqual(parsed, value)`: true for two instances of one class with only private
 * state.
 *
 * Docs quote (docs/guides/graphql.md): "each object also keeps, beside its fields ... what the
 * stored fields would not give back: each field whose scalar's `parseValue()` does not give its
 * value back"; what has no such form "is stored as it can be, and said once ... the app's log
 * says so once per type, with what is lost, at the first answer".
 *
 * Severity: medium (a replay's `@ResolveField()` answers another value than the first answer,
 * silently: no log line; the effect is not repeated).
 *
 * Fails now (un-skipped): first `zone: "Europe/Paris"`, replay `zone: "UTC"`, no warning.
 *
 * Controls: the same value object with public fields (`isDeepStrictEqual` sees them differ):
 * the first answer logs "cannot be replayed as it was"; a value in UTC replays the same.
 *
 * Suggested fix: in `fromWireAgain`/`sameData`, never take an instance of a class
 * (prototype neither `Object.prototype` nor null, and no Date/Map/Set/RegExp/typed array)
 * whose own enumerable data does not tell it (no own keys, or `#private` state) for "the same"
 * unless it is the same object, or compare through the scalar: `serialize(back)` vs
 * `serialize(value)` is not enough either; treat it as "not the same" and let `keepsExactly`
 * name it as a loss (it is not exact: a class instance), so the log says it.
 */
let pool: Pool;

class Zoned {
  readonly #epochMs: number;
  readonly #zone: string;

  constructor(epochMs: number, zone: string) {
    this.#epochMs = epochMs;
    this.#zone = zone;
  }

  static fromInstant(iso: string): Zoned {
    return new Zoned(Date.parse(iso), 'UTC');
  }

  get zone(): string {
    return this.#zone;
  }

  toInstant(): string {
    return new Date(this.#epochMs).toISOString();
  }
}

/** The same with public fields, which `isDeepStrictEqual` sees. */
class OpenZoned {
  constructor(
    readonly epochMs: number,
    readonly zone: string,
  ) {}

  toInstant(): string {
    return new Date(this.epochMs).toISOString();
  }
}

const Instant = new GraphQLScalarType({
  name: 'Instant',
  serialize: (value) => (value as Zoned | OpenZoned).toInstant(),
  parseValue: (value) => Zoned.fromInstant(value as string),
  parseLiteral: (ast) => (ast.kind === Kind.STRING ? Zoned.fromInstant(ast.value) : undefined),
});

const OpenInstant = new GraphQLScalarType({
  name: 'OpenInstant',
  serialize: (value) => (value as OpenZoned).toInstant(),
  parseValue: (value) => new OpenZoned(Date.parse(value as string), 'UTC'),
  parseLiteral: (ast) =>
    ast.kind === Kind.STRING ? new OpenZoned(Date.parse(ast.value), 'UTC') : undefined,
});

@ObjectType()
class Meeting {
  @Field(() => Int)
  id!: number;

  @Field(() => Instant)
  startsAt!: Zoned;
}

@ObjectType()
class OpenMeeting {
  @Field(() => Int)
  id!: number;

  @Field(() => OpenInstant)
  startsAt!: OpenZoned;
}

const AT = Date.UTC(2026, 11, 7, 9, 0, 0);

async function insert(): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO meetings DEFAULT VALUES RETURNING id',
  );
  return rows[0].id;
}

@Resolver(() => Meeting)
class MeetingsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Meeting)
  @Idempotent()
  async book(@Args('zone') zone: string): Promise<Meeting> {
    return { id: await insert(), startsAt: new Zoned(AT, zone) };
  }

  @ResolveField(() => String)
  zone(@Parent() meeting: Meeting): string {
    return meeting.startsAt.zone;
  }
}

@Resolver(() => OpenMeeting)
class OpenMeetingsResolver {
  @Mutation(() => OpenMeeting)
  @Idempotent()
  async bookOpen(): Promise<OpenMeeting> {
    return { id: await insert(), startsAt: new OpenZoned(AT, 'Europe/Paris') };
  }

  @ResolveField(() => String)
  zone(@Parent() meeting: OpenMeeting): string {
    return meeting.startsAt.zone;
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      resolvers: { Instant, OpenInstant },
    }),
  ],
  providers: [MeetingsResolver, OpenMeetingsResolver],
})
class MeetingsModule {}

describe('adversary 105: a private-field value object taken for the same after its scalar', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv105_gql_private_same', {
      module: MeetingsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE meetings (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(20_000)
      .send(JSON.stringify({ query }));

  const told = (calls: unknown[][], type: string) =>
    calls.some((args) =>
      args.some(
        (arg) =>
          typeof arg === 'string' &&
          arg.includes(`value of type ${type} cannot be replayed as it was`),
      ),
    );

  // First: the log says a type's loss once per process, and the UTC control's value (told
  // apart from its parsed copy no better: its state is as hidden) now says the same line
  // (fixer, 2026-12-07: moved, its assertions unchanged).
  it('a replay reads the zone the first answer read, or the log says it does not', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const query = 'mutation { book(zone: "Europe/Paris") { id startsAt zone } }';
      const first = await post('adv105-private-paris', query);
      const again = await post('adv105-private-paris', query);
      expect(first.body.data.book.zone).toBe('Europe/Paris');
      // eslint-disable-next-line no-console
      console.log('PRIVATE', first.text, again.text, told(warn.mock.calls, 'Meeting'));
      if (!told(warn.mock.calls, 'Meeting')) expect(again.body.data).toEqual(first.body.data);
    } finally {
      warn.mockRestore();
    }
  });

  it('control: a value in UTC (parseValue gives it back) replays the same answer', async () => {
    const query = 'mutation { book(zone: "UTC") { id startsAt zone } }';
    const first = await post('adv105-private-utc', query);
    const again = await post('adv105-private-utc', query);
    expect(first.body.data.book.zone).toBe('UTC');
    expect(again.body.data).toEqual(first.body.data);
  });

  it('control: the same value object with public fields is said in the log at the first answer', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const first = await post('adv105-private-open', 'mutation { bookOpen { id startsAt zone } }');
      expect(first.body.data.bookOpen.zone).toBe('Europe/Paris');
      expect(told(warn.mock.calls, 'OpenMeeting')).toBe(true);
    } finally {
      warn.mockRestore();
    }
  });
});
