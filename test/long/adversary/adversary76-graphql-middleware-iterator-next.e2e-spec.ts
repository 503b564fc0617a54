import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 76: a generator behind an object field's middleware that takes its first item
 * (`iterator.next().value`: the next free slot) fails at the first answer under
 * `@Idempotent()`: the library reads the generator into an array before the middleware runs
 * and gives it the array, which has no `next()`. The booking commits; the client gets an
 * error where the app answers the slot, and every replay the same error.
 *
 * The user code (Apollo on Express):
 *
 *   function* slotsAfter(hour: number) { for (let h = hour; h < 17; h++) yield { at: `${h}:00` }; }
 *   const firstOf: FieldMiddleware = async (_ctx, next) =>
 *     ((await next()) as Iterator<Slot>).next().value;
 *   @ObjectType() class Booking {
 *     @Field(() => Int) id!: number;
 *     @Field(() => Slot, { nullable: true, middleware: [firstOf] }) nextSlot!: Iterator<Slot>;
 *   }
 *   @Mutation(() => Booking) @Idempotent() book() { insert; return { id, nextSlot: slotsAfter(10) }; }
 *
 * Why: `walkValue` (lib/graphql/wire-value.ts) takes any one-shot iterator behind middleware
 * (`isOneShot`, lib/graphql/middleware-input.ts), whatever the field's type, and reads it with
 * `materialized` into an array, marking the field `spent`: the first answer's middleware is
 * given `replaced[property]`, the array. `array.next` is undefined: "TypeError: ... .next is
 * not a function", the field null with that error. (An endless generator, which the
 * middleware would have read once, is read for ever, in one synchronous loop.)
 *
 * What the docs promise (docs/guides/graphql.md): behind field middleware "the first call's
 * middleware gets the resolver's own value" and the field "is stored as its middleware's
 * input"; a one-shot iterator is "read once into an array ... and the first call's middleware
 * is given that array" is said of an iterator the middleware maps to a list, here it is
 * given an array where the app's code reads an iterator. The library's promise: bad input
 * gets a clear error, and the app's working answer is not changed.
 *
 * Control: the same mutation without `@Idempotent()`: `nextSlot` is `{ at: "10:00" }`.
 *
 * Severity: medium (a false error answered and stored: the booking committed, the client told
 * its field failed, on every retry too).
 *
 * Fails now: the first answer is `nextSlot: null` with "slots.next is not a function" at
 * `book.nextSlot`, where the app answers `{ at: "10:00" }`.
 *
 * Suggested fix: give the middleware an iterator over what was read (`array.values()`, which
 * has `next()` and is iterable), not the bare array; or, for a field that is not a list, keep
 * the iterator's reads lazy (record what the middleware reads and store that).
 *
 * Fixed (round 78): the library no longer reads nor stores a field middleware's input, and
 * never runs the middleware on a replay. The answer commits with the resolver's effects as
 * before (lib/graphql/run-field.ts `settle`), its middleware outputs pending; the operation's
 * answer hook (lib/graphql/replay-marker.ts: Apollo `willSendResponse`, Mercurius
 * `onResolution`) takes each middleware field's output from the answer's data, as the client
 * got it (masked by an outer serializer), and completes the stored answer with one fenced
 * UPDATE (`ClaimStore.completeAnswer`, lib/graphql/output-paths.ts `storeOutputsOf`). On a
 * replay a wrapper on each middleware field of the schema (lib/graphql/middleware-outputs.ts
 * `answerOutputsOf`) answers the stored output for its path, its scalars through
 * `parseValue()`; a replay meeting the outputs pending waits for them, bounded, then answers
 * `field_output_pending`. middleware-input.ts and middleware-extras.ts are gone.
 */
let pool: Pool;

@ObjectType()
class Slot {
  @Field()
  at!: string;
}

function* slotsAfter(hour: number): Generator<Slot> {
  for (let h = hour; h < 17; h++) yield { at: `${h}:00` };
}

/** Nest's field middleware: the first slot of those given. */
const firstOf: FieldMiddleware = async (_ctx, next) => {
  const slots = (await next()) as Iterator<Slot>;
  return slots.next().value as Slot | undefined;
};

@ObjectType()
class Booking {
  @Field(() => Int)
  id!: number;

  @Field(() => Slot, { nullable: true, middleware: [firstOf] })
  nextSlot!: Iterator<Slot>;
}

@Resolver(() => Booking)
class BookingsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  private async booking(): Promise<Booking> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO bookings DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, nextSlot: slotsAfter(10) };
  }

  @Mutation(() => Booking)
  @Idempotent()
  book(): Promise<Booking> {
    return this.booking();
  }

  @Mutation(() => Booking)
  bookPlain(): Promise<Booking> {
    return this.booking();
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
    }),
  ],
  providers: [BookingsResolver],
})
class BookingsModule {}

describe('adversary 76: a generator behind an object field middleware that reads next()', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_iter_next', {
      module: BookingsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE bookings (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (query: string, key?: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json');
    if (key) call.set('Idempotency-Key', key);
    return call.timeout(20_000).send(JSON.stringify({ query }));
  };

  const count = async () =>
    Number(
      (await fixture.admin.query<{ n: string }>('SELECT count(*) AS n FROM bookings')).rows[0].n,
    );

  it('control: without the library, the next slot', async () => {
    const plain = await post('mutation { bookPlain { id nextSlot { at } } }');
    expect(plain.body).toEqual({
      data: { bookPlain: { id: expect.any(Number), nextSlot: { at: '10:00' } } },
    });
  });

  it('with @Idempotent(): the next slot, and the replay the same', async () => {
    const before = await count();
    const first = await post('mutation { book { id nextSlot { at } } }', 'adv76-mw-iter-next-a');
    const again = await post('mutation { book { id nextSlot { at } } }', 'adv76-mw-iter-next-a');
    expect(await count()).toBe(before + 1);
    // Fails: nextSlot null, "slots.next is not a function".
    expect(first.body).toEqual({
      data: { book: { id: expect.any(Number), nextSlot: { at: '10:00' } } },
    });
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['book'] } },
    });
  });
});
