import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
  createUnionType,
  Field,
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
 * Adversary, round 44b: a mutation that returns a union whose `resolveType()` tells its
 * members apart by a field (Nest's own recipe, docs.nestjs.com/graphql/unions-and-enums:
 * `resolveType(value) { if (value.name) return Author; if (value.title) return Book; }`)
 * answers at the first call and fails on every replay when the client does not select that
 * field.
 *
 * The app (Apollo on Express, the pool seam, code first): `ResultUnion = createUnionType({
 * types: () => [Author, Book], resolveType(value) { ... } })` as in Nest's docs; `publish(ref)`
 * inserts a row and returns `new Book(id, title)` (`@Idempotent()`). The client selects
 * `{ __typename ... on Book { id } ... on Author { id } }`: it needs the id and the kind.
 *
 * What happens: at the first call `outputWire` (lib/graphql/wire-value.ts:180-182,
 * `memberType`, wire-value.ts:398-406) calls the app's `resolveType()` on the resolver's own
 * `Book`, which has its `title`: `Book`, stored with `__typename: "Book"` (wire-value.ts:271).
 * Only the selection is stored (wire-value.ts:194-214): `title` is a field the client did not
 * select, so it is neither stored nor kept (`KEPT` holds only data that is no field, or
 * unselected fields when a selected one has a `@ResolveField()`, wire-value.ts:200-205). On a
 * replay `fromWire` (wire-value.ts:455-462) finds the member by the stored `__typename` and
 * rebuilds a `Book` with `id` alone; but GraphQL, answering the replay, calls the union's
 * `resolveType()` again on that value (the library stores a `__typename` but nothing in the
 * replay path makes GraphQL go by it): `value.title` is undefined, `value.name` too, the
 * function returns undefined, and graphql-js answers "Abstract type \"ResultUnion\" must
 * resolve to an Object type at runtime": `data: null` on every retry of a mutation that
 * committed. (A `resolveType` that falls back to one member, `return value.name ? Author :
 * Book`, would silently answer the wrong member, its selected fields dropped.) Nothing is
 * logged: the guide says a `resolveType` "needs a `__typename` or a field to go by", and it
 * has a field.
 *
 * Expected: the replay is the first answer (`{ __typename: "Book", id }`, the replay marker
 * added), one row.
 *
 * Control: the same mutation with `title` in the selection: stored, the replay's
 * `resolveType()` finds it, and the replay is the first answer. Passes.
 *
 * Severity: critical (a committed mutation's stored answer is lost on every replay; with a
 * fallback member, a wrong answer is replayed).
 */
let pool: Pool;

@ObjectType()
class Author {
  @Field(() => Int)
  id!: number;

  @Field()
  name!: string;
}

@ObjectType()
class Book {
  @Field(() => Int)
  id!: number;

  @Field()
  title!: string;

  constructor(id: number, title: string) {
    this.id = id;
    this.title = title;
  }
}

const ResultUnion = createUnionType({
  name: 'ResultUnion',
  types: () => [Author, Book] as const,
  resolveType(value: { name?: string; title?: string }) {
    if (value.name) return Author;
    if (value.title) return Book;
    return null;
  },
});

@Resolver()
class PublishResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => ResultUnion)
  @Idempotent()
  async publish(@Args('ref') ref: string): Promise<typeof ResultUnion> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO effects (ref) VALUES ($1) RETURNING id',
      [ref],
    );
    return new Book(rows[0].id, `Book ${ref}`);
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      includeStacktraceInErrorResponses: false,
    }),
  ],
  providers: [PublishResolver],
})
class PublishModule {}

describe('adversary 44b: a union whose resolveType() reads an unselected field', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv44b_union_resolve_type', {
      module: PublishModule,
      max: 4,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE effects (id serial PRIMARY KEY, ref text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const send = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Idempotency-Key', key)
      .timeout(5_000)
      .send({ query });
  const effects = async (ref: string) =>
    Number(
      (await fixture.admin.query('SELECT count(*) FROM effects WHERE ref = $1', [ref])).rows[0]
        .count,
    );
  const replayedAs = (first: { body: object }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  it('control: the field resolveType() reads is selected: the replay is the first answer', async () => {
    const query =
      'mutation { publish(ref: "ctl") { __typename ... on Book { id title } ... on Author { id } } }';
    const first = await send('ctl', query);
    const replay = await send('ctl', query);
    expect(first.body).toEqual({
      data: { publish: { __typename: 'Book', id: expect.any(Number), title: 'Book ctl' } },
    });
    expect(replay.body).toEqual(replayedAs(first, 'publish'));
    expect(await effects('ctl')).toBe(1);
  });

  it('only the id selected: the replay is the first answer', async () => {
    const query =
      'mutation { publish(ref: "ids") { __typename ... on Book { id } ... on Author { id } } }';
    const first = await send('ids', query);
    const replay = await send('ids', query);
    expect(first.body).toEqual({
      data: { publish: { __typename: 'Book', id: expect.any(Number) } },
    });
    expect(replay.body).toEqual(replayedAs(first, 'publish'));
    expect(await effects('ids')).toBe(1);
  });
});
