import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  createUnionType,
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
 * Adversary 83 (graphql): the walk that notes union list items' places in a middleware output
 * (`indexItems`) reads the output's properties itself, apart from GraphQL: a getter that loads
 * a list of union members (an ORM's lazy relation, an API client's) is loaded though the
 * operation does not select it; and where each read loads anew (new objects), the places are
 * noted on objects GraphQL never completes, so the member GraphQL's `resolveType()` told is
 * noted at the list's path, not the item's: the retry of the very same operation answers the
 * item as another member, silently (`history: [{}]` where the first answer gave `[{
 * legalName: 'Acme Ltd' }]`).
 *
 * The app: `createOrder` (Nest's default non-null type) with `@Idempotent()` answers `Order {
 * id profile }`, `profile: Profile` behind Nest's field middleware `visible` (null for a
 * hidden profile); `Profile { name history: [Payee] }`, `history` a getter that loads the
 * payment history on read; `Payee = Person | Company` told apart as Nest's recipe does (by
 * `vat`). One screen sends `profile { name }`; another `profile { name history { ... on
 * Company { legalName } } }`, and retries it.
 *
 * Why: `indexItems` (lib/graphql/item-indexes.ts:110) reads `held[each.name]` for every field
 * whose type may hold a list of members, selected or not (the getter runs once more than
 * GraphQL runs it, and where the operation does not select it, it runs when nothing should);
 * the objects it places are that read's. GraphQL reads the getter again, gets other objects;
 * `itemIndexes` finds no places for them (:138, `[]`: "a single member there"), `memberPath`
 * (lib/graphql/replayed-member.ts:92) notes the member at `profile.history`, the list's path,
 * not at `profile.history.0`; the replay's item has no member and goes to the app's
 * `resolveType()`, which reads `vat`, never selected, never stored: a `Person`, whose `name`
 * the item lacks.
 *
 * Docs (docs/guides/graphql.md, "What is stored, and replayed"): "a field the operation does
 * not select is neither read (a getter is not called, a TypeORM lazy relation not loaded) nor
 * stored"; "Field middleware": "a union's or an interface's member as the first answer's
 * `resolveType()` told it"; "A union's or an interface's member in a list is noted at each
 * place of the item".
 *
 * Control (passes): the getter gives the list it holds (the same objects each read), selected,
 * retried.
 *
 * Severity: high for the replay (a retry answers another member's shape of a payment, no error:
 * a client reads the company as a person with no name); medium for the load (each first
 * answer loads a relation, or calls an API, no one asked for, in the request's time).
 *
 * Fails now: the retry answers `history: [{}]`; the unselected getter is read once.
 *
 * Suggested fix: walk only what GraphQL reads: note the places from the items GraphQL completes
 * (at the wrapper of each list field under the output, or by walking the answer's `data` with
 * the members told at the list path plus the order of `resolveType()` calls per path), not from
 * a read of the output's properties of its own; at the least, walk only the selected fields
 * (`selectedFields`, as `completedOutput` does), and where an item has no places, note nothing
 * rather than the list's path.
 *
 * Fixed (the unselected getter): `indexItems` (lib/graphql/item-indexes.ts) walks only the
 * fields the operation selects (`selectedFields`, through fragments and `@skip`/`@include`),
 * each read by the property Nest reads; an item of a list with no place noted has no member
 * noted (`itemIndexes` with `listed`, lib/graphql/replayed-member.ts), never one at the list's
 * path; places are kept by the list's path in the answer (see adversary 83 union-list).
 * Not fixed (fixer), the selected getter that loads anew on each read: the walk reads the
 * selected getter once more than GraphQL (2 loads), and its objects are not the ones GraphQL
 * completes, so the items have no place and no member is noted; the replay's item still goes to
 * the app's `resolveType()` (`history: [{}]`). Route: note the places from the items GraphQL
 * completes, not from a read of the output (the order of `resolveType()` calls per list path,
 * matched at the answer hook to the non-null items of the list in `data`, errors accounted), or
 * store such an item's member as unknown and answer an honest error on its replay.
 *
 * Fixed (session of 2026-12-06, third), the selected getter that loads anew: the walk
 * (`indexItems`, lib/graphql/item-indexes.ts) reads no getter at all (`isAccessor`, own or of
 * its class), noting the paths it did read; each field whose value may hold a list of members,
 * inside a first answer's middleware output (`insideFirstOutput`, lib/graphql/output-paths.ts),
 * gets a wrapper (`markListsOf`, lib/graphql/middleware-outputs.ts) that marks the value
 * GraphQL's own read gave, where the walk did not read it (`indexItemsUnread`): the getter is
 * loaded once, and its items, the ones GraphQL completes, are placed, so each item's member is
 * noted at its own place. Specs: item-indexes.spec.ts, output-paths.spec.ts.
 * Docs: docs/guides/graphql.md, "Field middleware".
 */
let pool: Pool;

@ObjectType()
class Person {
  @Field()
  name!: string;

  @Field(() => [Payee])
  contacts: (Person | Company)[] = [];

  hidden?: boolean;
}

@ObjectType()
class Company {
  @Field()
  legalName!: string;

  @Field()
  vat!: string;

  @Field(() => [Payee])
  contacts: (Person | Company)[] = [];

  hidden?: boolean;
}

/** Told apart as Nest's recipe does: by data the member has. */
const Payee = createUnionType({
  name: 'Payee',
  types: () => [Person, Company] as const,
  resolveType: (value: Partial<Company>) => (value.vat !== undefined ? Company : Person),
});

/** How many times the profile's payment history was loaded (an API call each). */
let historyLoads = 0;
/** Whether each read loads it anew (a client's API call), or gives the list it holds. */
let loadsAnew = true;
const held = [Object.assign(new Company(), { legalName: 'Acme Ltd', vat: 'GB123' })];

@ObjectType()
class Profile {
  @Field()
  name!: string;

  /** Loaded on read (an ORM's lazy relation, a client's API call): selected on one screen only. */
  @Field(() => [Payee])
  get history(): (Person | Company)[] {
    historyLoads += 1;
    if (!loadsAnew) return held;
    return [Object.assign(new Company(), { legalName: 'Acme Ltd', vat: 'GB123' })];
  }
}

/** Nest's field middleware: the profile as this caller may see it (a hidden one is null). */
const visible: FieldMiddleware = async (_ctx, next) => {
  const value = (await next()) as Profile & { hidden?: boolean };
  return value.hidden ? null : value;
};

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Field(() => Profile, { nullable: true, middleware: [visible] })
  profile!: Profile;
}

@Resolver(() => Order)
class OrdersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Order)
  @Idempotent()
  async createOrder(): Promise<Order> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO orders DEFAULT VALUES RETURNING id',
    );
    return { id: rows[0].id, profile: Object.assign(new Profile(), { name: 'Ada' }) };
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
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 83: a getter of a middleware output the operation does not select', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv83_gql_mw_unselected_getter', {
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

  const HISTORY =
    'mutation { createOrder { id profile { name history { ... on Company { legalName } } } } }';

  it('control: the history a getter of the list it holds, selected, replayed', async () => {
    loadsAnew = false;
    const first = await post('adv83-getter-held', HISTORY);
    expect(first.body.data.createOrder.profile).toEqual({
      name: 'Ada',
      history: [{ legalName: 'Acme Ltd' }],
    });
    const again = await post('adv83-getter-held', HISTORY);
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
  });

  it('the history loaded anew on each read, selected: the retry answers the first answer', async () => {
    loadsAnew = true;
    historyLoads = 0;
    const first = await post('adv83-getter-selected', HISTORY);
    expect(first.body.data.createOrder.profile).toEqual({
      name: 'Ada',
      history: [{ legalName: 'Acme Ltd' }],
    });
    const again = await post('adv83-getter-selected', HISTORY);
    // Fails: history [{}], the company told as a Person by the app's resolveType.
    expect(again.body).toEqual({
      ...first.body,
      extensions: { idempotency: { replayed: ['createOrder'] } },
    });
    expect(historyLoads).toBe(1);
  });

  it('the history not selected: never loaded', async () => {
    loadsAnew = true;
    historyLoads = 0;
    const query = 'mutation { createOrder { id profile { name } } }';
    const first = await post('adv83-getter-unselected', query);
    expect(first.body.data.createOrder.profile).toEqual({ name: 'Ada' });
    // Fails: loaded once, by the library's walk for union lists.
    expect(historyLoads).toBe(0);
  });
});
