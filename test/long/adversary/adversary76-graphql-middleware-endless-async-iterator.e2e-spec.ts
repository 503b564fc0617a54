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
 * Adversary 76: an endless async generator behind list middleware that takes the first few
 * of it (the next free appointment slots, day after day, the middleware keeping five) hangs
 * the mutation and holds its key: the library reads the generator to its end, which never
 * comes, before it stores the answer; the middleware, which would stop after five, never runs.
 *
 * The user code (Apollo on Express):
 *
 *   async function* freeSlots(from: number) {        // endless: one query per day
 *     for (let day = from; ; day++) yield* (await pool.query(SLOTS_OF_DAY, [day])).rows;
 *   }
 *   const firstFive: FieldMiddleware = async (_ctx, next) => {
 *     const slots = [];
 *     for await (const slot of (await next()) as AsyncIterable<Slot>) {
 *       slots.push(slot);
 *       if (slots.length === 5) break;
 *     }
 *     return slots;
 *   };
 *   @ObjectType() class Booking { @Field(() => Int) id; @Field(() => [Slot], { middleware: [firstFive] }) nextSlots; }
 *   @Mutation(() => Booking) @Idempotent() book() { insert; return { id, nextSlots: freeSlots(1) }; }
 *
 * Why: `walkValue` (lib/graphql/wire-value.ts) sees a one-shot async iterator behind
 * middleware (`isAsyncOneShot`, lib/graphql/middleware-input.ts) and reads it whole with
 * `readOnceAsync`/`readAsync` (`for await` to its end) inside `outputWire`, before
 * `commitAnswer` (run-field.ts `settle`). An endless iterator never ends: the transaction
 * stays open, the answer never comes, the key stays claimed (renewed by the heartbeat), and
 * every retry is `key_in_progress`. (A sync endless generator, `function* slotsFrom()`, is read
 * by `materialized` in one synchronous loop: the whole process stops.)
 *
 * What the docs promise: "nothing hangs and holds a key" (the library's promise);
 * docs/guides/graphql.md: "A one-shot iterator (... an async generator reading rows in
 * batches) ... is read once into an array, stored as a list, and the first call's middleware
 * is given that array" — a GraphQL list GraphQL itself never reads past what the middleware
 * gives it.
 *
 * Control: the same mutation without `@Idempotent()`: answered at once with five slots, the
 * generator read six times at most.
 *
 * Severity: high (a hang that holds the key, for as long as the generator goes: for ever).
 *
 * Fails now: when the generator has yielded 1000 slots, the first call still has no answer and
 * its retry answers `key_in_progress`.
 *
 * Suggested fix: do not read a one-shot iterator ahead of the middleware: give the middleware
 * a recording iterator (what it reads is what is stored), and store what the middleware read
 * once it settles; or bound the read (by `maxResponseBytes`) and answer an error past it.
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
 *
 * Changed (fixer): the case waits for the first answer or 1000 slots read, whichever comes
 * first (it waited for 1000 slots, which the fixed library never reads), and checks that the
 * middleware alone read the generator (six slots at most) and the replay is the first answer.
 */
let pool: Pool;

/** The slots yielded so far, and who waits for a count of them. */
let yielded = 0;
let stopped = false;
const waiters: { count: number; done: () => void }[] = [];
const yieldedAtLeast = (count: number) =>
  new Promise<void>((done) => {
    if (yielded >= count) done();
    else waiters.push({ count, done });
  });

@ObjectType()
class Slot {
  @Field(() => Int)
  day!: number;

  @Field()
  at!: string;
}

/** The free slots from `from` on, a day at a time: endless (until the test ends). */
async function* freeSlots(from: number): AsyncGenerator<Slot> {
  for (let day = from; !stopped; day++) {
    const { rows } = await pool.query<Slot>(
      `SELECT $1::int AS day, to_char(h, 'HH24:MI') AS at
         FROM generate_series('2026-01-01 09:00'::timestamp, '2026-01-01 16:30', '30 minutes') h`,
      [day],
    );
    for (const slot of rows) {
      yielded += 1;
      for (const waiter of waiters.filter((w) => yielded >= w.count)) {
        waiters.splice(waiters.indexOf(waiter), 1);
        waiter.done();
      }
      yield slot;
    }
  }
}

/** Nest's field middleware: the first five slots. */
const firstFive: FieldMiddleware = async (_ctx, next) => {
  const slots: Slot[] = [];
  for await (const slot of (await next()) as AsyncIterable<Slot>) {
    slots.push(slot);
    if (slots.length === 5) break;
  }
  return slots;
};

@ObjectType()
class Booking {
  @Field(() => Int)
  id!: number;

  @Field(() => [Slot], { middleware: [firstFive] })
  nextSlots!: AsyncIterable<Slot>;
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
    return { id: rows[0].id, nextSlots: freeSlots(1) };
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

describe('adversary 76: an endless async generator behind list middleware', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv76_gql_mw_endless_iter', {
      module: BookingsModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE bookings (id serial PRIMARY KEY)');
      },
    });
  }, 60_000);

  afterAll(async () => {
    // Ends the generator, so that the walk ends and the app closes.
    stopped = true;
    await fixture?.close();
  }, 120_000);

  const post = (query: string, key?: string) => {
    const call = request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json');
    if (key) call.set('Idempotency-Key', key);
    return call.timeout(60_000).send(JSON.stringify({ query }));
  };

  const five = [
    { day: 1, at: '09:00' },
    { day: 1, at: '09:30' },
    { day: 1, at: '10:00' },
    { day: 1, at: '10:30' },
    { day: 1, at: '11:00' },
  ];

  it('control: without the library, five slots at once', async () => {
    yielded = 0;
    const plain = await post('mutation { bookPlain { id nextSlots { day at } } }');
    expect(plain.body).toEqual({
      data: { bookPlain: { id: expect.any(Number), nextSlots: five } },
    });
    expect(yielded).toBeLessThanOrEqual(6);
  });

  it('with @Idempotent(): five slots, the key not held', async () => {
    yielded = 0;
    let answered = false;
    const first = post('mutation { book { id nextSlots { day at } } }', 'adv76-mw-endless-a').then(
      (response) => {
        answered = true;
        return response;
      },
      (error: Error) => {
        answered = true;
        throw error;
      },
    );
    // The first answer, or (as it was) 1000 slots read with no answer, whichever comes first.
    await Promise.race([first.catch(() => undefined), yieldedAtLeast(1000)]);
    const slotsRead = yielded;
    const retry = await post('mutation { book { id nextSlots { day at } } }', 'adv76-mw-endless-a');
    const seen = { answered, retryCode: retry.body.errors?.[0]?.extensions?.code as unknown };
    stopped = true;
    await first.catch(() => undefined);
    expect(seen).toEqual({ answered: true, retryCode: undefined });
    // Read by the middleware alone, as without the library.
    expect(slotsRead).toBeLessThanOrEqual(6);
    expect(retry.body).toEqual({
      ...(await first).body,
      extensions: { idempotency: { replayed: ['book'] } },
    });
  }, 120_000);
});
