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
  ResolveField,
  Resolver,
  Parent,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 84 (graphql): an operation whose whole `data` another root field's error nulled
 * (a non-null mutation after the idempotent one that throws), with a middleware output that
 * cannot be made again (a `@ResolveField()` inside it) and an unrelated nullable field of the
 * mutation that failed on its own (`note`, a Promise that rejects): the retry answers the
 * output `profile: null` with the *note's* error again (`note service down` at
 * `createOrder.note`, listed twice), where the docs promise `field_output_pending` at
 * `createOrder.profile` (and answer just that without the note's error, control).
 *
 * User code: `Order { id; note (nullable, a Promise of a notes service, down); profile
 * (nullable, behind Nest field middleware `visible`) }`, `Profile { name }` with a
 * `@ResolveField() initials` on it; `createOrder` with `@Idempotent()`; `notify: Boolean!`, a
 * non-idempotent mutation after it that fails at the first call. Apollo on Express. The
 * client retries the same operation.
 *
 * Code path: lib/graphql/output-paths.ts `outputsIn`: the output is not remade
 * (`completedOutput` gives up on the app-resolved `initials`), so `nullingError(data, root,
 * path, located)` is asked which error nulled it: with `data` null, `nulledAncestor` answers
 * 0, `above` is `''`, and the first located error under the mutation whose place is null (the
 * note's, at `note`, unrelated to `profile`) is taken as the one that nulled the output:
 * `nulled[profile] = 'note'`, never `lost`. The replay (`outputAt` -> `nulled`) throws the
 * note's error from `profile` (middleware-outputs.ts `fieldErrorAgain`).
 *
 * Docs (docs/guides/graphql.md, "Field middleware"): "Where it cannot be made so (an output
 * under a field your app resolves ...), a replay answers that field `field_output_pending`
 * (below), never `field_not_stored`: its work is done once, and a query reads it"; "A middleware
 * field that ran but has no value in the first answer, an ancestor nulled by an error
 * elsewhere (a sibling's ...), answers that error again" (the note nulled nothing: `note` is
 * nullable).
 *
 * Severity: medium: a dishonest error: the profile is said to have failed with the notes
 * service's error (twice in `errors`), not that its output is pending and should be read with
 * a query; the answer's bytes match no answer GraphQL gives.
 *
 * Fails now: the retry answers `errors: [note service down at createOrder.note, note service
 * down at createOrder.note]`, `createOrder: { id, note: null, profile: null }`; control (no
 * note selected) answers `field_output_pending` at `createOrder.profile`.
 *
 * Suggested fix: in `nullingError`, with the whole `data` nulled from above the mutation, an
 * error under the mutation nulled the field only where its place (or the nearest nullable
 * ancestor GraphQL would null from it) is the field's own or above it: the error's path must
 * be an ancestor-or-self of the field's path, or null a common ancestor by non-null
 * propagation; otherwise the output is `lost` (`field_output_pending`).
 *
 * Fixed: `nullingError` (lib/graphql/output-paths.ts), with the whole `data` null, takes an
 * error under the mutation's field as the one that nulled a middleware field only where the
 * null GraphQL put for it is at or above the field: `nulledPlace` (lib/graphql/nulled-place.ts)
 * reads the operation (each step's field by its response key, through fragments, a member by
 * the one noted) for the nearest nullable place at or above the error's field; where that
 * cannot be told, the first error is taken as before. The note's error nulled only `note`: the
 * profile is `lost` (`field_output_pending`). The assertion on `errors` now takes either order
 * (the replayed note's error is a rejected Promise's, the profile's thrown at once; the order
 * was never the point). (commit: fix84gql2 "root-nulled outputs: an error blamed only where its
 * null reaches the field")
 */
let pool: Pool;
let notifyFails = false;

const visible: FieldMiddleware = async (_ctx, next) => {
  const v = (await next()) as Record<string, unknown>;
  return v && { ...v };
};

@ObjectType()
class Profile {
  @Field()
  name!: string;
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field({ nullable: true })
  note?: string;

  @Field(() => Profile, { middleware: [visible], nullable: true })
  profile?: Profile;
}

@Resolver(() => Profile)
class ProfileResolver {
  @ResolveField(() => String)
  initials(@Parent() p: Profile): string {
    return p.name.slice(0, 1);
  }
}

/** The order's note, from a notes service that is down. */
async function noteOf(): Promise<string> {
  await new Promise((resolve) => setTimeout(resolve, 5));
  throw new Error('note service down');
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order, { nullable: true })
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    const note = noteOf();
    // Not selected by every operation: no unhandled rejection when GraphQL does not read it.
    note.catch(() => undefined);
    return {
      id: rows[0].id,
      note: note as unknown as string,
      profile: { name: 'ada' },
    };
  }

  @Mutation(() => Boolean)
  notify(): boolean {
    if (notifyFails) throw new Error('mail down');
    return true;
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
  providers: [OrdersResolver, ProfileResolver],
})
class OrdersModule {}

describe('adversary 84: a middleware output that cannot be made again, with an unrelated failed field, its whole data nulled by another root field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv84_gql_mw_root_sibling_err', {
      module: OrdersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE orders (id serial PRIMARY KEY)');
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

  const pending = expect.objectContaining({
    path: ['createOrder', 'profile'],
    extensions: { code: 'field_output_pending' },
  });

  const retried = async (key: string, query: string) => {
    notifyFails = true;
    const first = await post(key, query);
    expect(first.body.data).toBeNull();
    notifyFails = false;
    return (await post(key, query)).body as { data: unknown; errors: unknown[] };
  };

  it('control: no other failed field, the retry answers field_output_pending at the profile', async () => {
    const again = await retried(
      'adv84-sibling-none',
      'mutation { createOrder { id profile { name initials } } notify }',
    );
    expect(again.data).toEqual({
      createOrder: { id: expect.any(Number), profile: null },
      notify: true,
    });
    expect(again.errors).toEqual([pending]);
  });

  it("the note failed too: the retry answers the profile field_output_pending, not the note's error", async () => {
    const again = await retried(
      'adv84-sibling-note',
      'mutation { createOrder { id note profile { name initials } } notify }',
    );
    expect(again.data).toEqual({
      createOrder: { id: expect.any(Number), note: null, profile: null },
      notify: true,
    });
    // In either order: the replayed note's error is a rejected Promise's (as at the first
    // answer), the profile's is thrown at once.
    expect(again.errors).toHaveLength(2);
    expect(again.errors).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ message: 'note service down', path: ['createOrder', 'note'] }),
        pending,
      ]),
    );
  });
});
