import { jest } from '@jest/globals';
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
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 70: on Mercurius with `jit: 1`, a mutation whose `DateTime` argument comes
 * from a variable with a DEFAULT in the document (`mutation Book($at: DateTime =
 * "2026-03-01T09:00:00Z") { book(at: $at) }`, the variable left out) is refused with
 * key_mismatch (422) on its honest retry, for ever, after its first run committed.
 *
 * Why: round 69's fix reads the arguments with graphql-js's `getArgumentValues(fieldDef, node,
 * info.variableValues)`, but `info.variableValues` is still the EXECUTOR's coercion. graphql-js
 * gives the default as the scalar parsed it (a `Date`); graphql-jit (lib/variables.js
 * `generateInput`) inlines it as `JSON.stringify(defaultValue)`: the ISO STRING. Nest's
 * DateTime `serialize()` writes anything but a `Date` as null, so `inputWire` fingerprints the
 * first (interpreted) run as `{ at: "2026-03-01T09:00:00.000Z" }` and the retry (compiled at
 * the document's second run) as `{ at: null }`. (The same holds for an input field's
 * `defaultValue: new Date(...)` and the Timestamp scalar.) And once compiled, two documents with
 * other dates both fingerprint as null.
 *
 * Expected: the retry of the same request is replayed (one row), as without jit.
 *
 * Controls (pass): the same sequence without jit; with jit and the variable given.
 *
 * Severity: medium-low (Mercurius with jit and a date variable's default: 422 for ever on a
 * committed mutation, as round 69).
 *
 * Fixed: the variables are coerced by graphql-js from what the request sent, defaults included
 * (`sentVariables` in lib/graphql/read-field.ts), not taken from the executor.
 */
let pool: Pool;

@ObjectType()
class Booking {
  @Field(() => Int)
  id!: number;
}

@Resolver()
class BookResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Booking)
  @Idempotent()
  async book(@Args('at', { type: () => Date }) at: Date | string): Promise<Booking> {
    // pg takes a Date or its ISO string alike: the app sees no difference.
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO bookings (at) VALUES ($1) RETURNING id',
      [at],
    );
    return { id: rows[0].id };
  }
}

function bookModule(jit: number | undefined) {
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
      GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
        ...(jit === undefined ? {} : { jit }),
      }),
    ],
    providers: [BookResolver],
  })
  class BookModule {}
  return BookModule;
}

const documentOf = (name: string, at: string) =>
  `mutation ${name}($at: DateTime = "${at}") { book(at: $at) { id } }`;

describe.each([
  ['control: no jit', undefined],
  ['jit: 1', 1],
] as const)('adversary 70: a DateTime variable default, Mercurius %s', (name, jit) => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp(`adv70_jit_date_${jit ?? 'off'}`, {
      module: bookModule(jit),
      max: 4,
      adapter: 'fastify',
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE bookings (id serial PRIMARY KEY, at timestamptz NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (key: string, query: string, variables: Record<string, unknown>) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send({ query, variables });
  const rows = async (at: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM bookings WHERE at = $1', [at])).rows[0]
        .count,
    );
  const replayOf = (first: { body: object }) => ({
    ...first.body,
    extensions: { idempotency: { replayed: ['book'] } },
  });
  const tag = jit === undefined ? 'off' : 'jit';

  it(`control (${name}): the variable given, the retries replay`, async () => {
    const at = jit === undefined ? '2026-03-01T08:00:00Z' : '2026-03-02T08:00:00Z';
    const query = documentOf('Given', '2030-01-01T00:00:00Z');
    const first = await send(`given-${tag}`, query, { at });
    expect(first.body.errors).toBeUndefined();
    for (let i = 0; i < 2; i++) {
      expect((await send(`given-${tag}`, query, { at })).body).toEqual(replayOf(first));
    }
    expect(await rows(at)).toBe(1);
  });

  it(`the variable's default (${name}): the same request again is replayed, not refused`, async () => {
    const at = jit === undefined ? '2026-03-01T09:00:00Z' : '2026-03-02T09:00:00Z';
    const query = documentOf('Defaulted', at);
    const first = await send(`default-${tag}`, query, {});
    expect(first.body.errors).toBeUndefined();
    // Observed with jit: 1: errors [{ extensions: { code: 'key_mismatch', status: 422 } }].
    for (let i = 0; i < 2; i++) {
      const replay = await send(`default-${tag}`, query, {});
      expect(replay.body.errors?.[0]?.extensions).toBeUndefined();
      expect(replay.body).toEqual(replayOf(first));
    }
    expect(await rows(at)).toBe(1);
  });
});
