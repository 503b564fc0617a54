import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Args,
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
 * Adversary 75: a retry that selects a field the first call did not select gets a made-up
 * `null` for it, with no error, when that field has Nest field middleware
 * (`@Field({ middleware })`), where the docs promise the `field_not_stored` error "never a
 * made-up null". The client is told the transfer has no note, though it has one.
 *
 * The app (Nest's docs' logger middleware):
 *
 *   const logged: FieldMiddleware = async (ctx, next) => {
 *     const value = await next();
 *     seen.push(`${ctx.info.parentType.name}.${ctx.info.fieldName}`);
 *     return value;
 *   };
 *   @ObjectType() class Transfer {
 *     @Field(() => Int) id!: number;
 *     @Field({ nullable: true, middleware: [logged] }) note?: string;
 *   }
 *   @Mutation(() => Transfer) @Idempotent()
 *   createTransfer(@Args('note') note: string) { ... INSERT ... RETURNING id, note }
 *
 * Apollo on Express, the `Idempotency-Key` header. The first call selects `{ id }`; its retry
 * selects `{ id note }`.
 *
 * Why: `isResolvedByApp` (lib/graphql/resolved-fields.ts) now takes a field with field
 * middleware for the app's resolver, as a `@ResolveField()`. `walkObject`
 * (lib/graphql/wire-value.ts) keeps a parent's unselected own data only when one of its
 * SELECTED fields is the app's; here none is (`id`), so `note` is neither stored nor kept.
 * On the replay, the loop that guards a field the first call did not select with the
 * `field_not_stored` getter (`format >= 3`, in the replay's rebuilding of the object) skips
 * every field `isResolvedByApp` names, as "it runs again, and reads none of it". But the
 * middleware's resolver is Nest's read of the parent's property behind it: it reads the
 * stored object, which has no `note`, and answers `null`.
 *
 * Expected (docs/guides/graphql.md, "A retry that selects other fields"): "A retry that
 * selects a field the first call did not gets, for that field, an error, never a made-up
 * null: GraphQL answers it in `errors` with the field's `path` and `extensions.code`
 * `field_not_stored`"; only "a field that has a `@ResolveField()` of its own is not refused".
 *
 * Control: the same type without the middleware on `note`: the retry gets the
 * `field_not_stored` error at `["createTransfer", "note"]`; passes.
 *
 * Regression: this file passes with lib/graphql/{resolved-fields,nest-fields,graphql-module}.ts
 * as they were before round 74's commit ab82ebf (checked out over the current ones).
 *
 * Severity: medium (a wrong answer on a replay, silently: a null where the first call's data
 * holds a value).
 *
 * Failed: `expect(again.body.errors?.[0]?.extensions?.code).toBe('field_not_stored')`:
 * received undefined (the answer is `{ data: { createTransfer: { id, note: null } } }`).
 *
 * Suggested fix: only a resolver that computes the field itself (a `@ResolveField()`, a
 * schema resolver of the app's own) may skip the guard; a field whose resolver is Nest's
 * property read behind middleware reads the stored object, so guard it as a plain field (or
 * keep its parent's data whenever the type has such a field, selected or not).
 *
 * Fixed: `isResolvedByApp` (lib/graphql/resolved-fields.ts) now names only the app's own
 * resolvers (`fieldResolution`: `app`), not a field behind middleware (`middleware`), so the
 * replay's guard in `fromWire` (lib/graphql/wire-value.ts) refuses an unstored middleware
 * field as a plain one: the middleware's `next()` reads the `field_not_stored` getter.
 */
let pool: Pool;
const seen: string[] = [];

const logged: FieldMiddleware = async (ctx, next) => {
  const value: unknown = await next();
  seen.push(`${ctx.info?.parentType.name}.${ctx.info?.fieldName}`);
  return value;
};

@ObjectType()
class Transfer {
  @Field(() => Int)
  id!: number;

  @Field({ nullable: true, middleware: [logged] })
  note?: string;
}

@ObjectType()
class PlainTransfer {
  @Field(() => Int)
  id!: number;

  @Field({ nullable: true })
  note?: string;
}

async function insert(note: string): Promise<{ id: number; note: string }> {
  const { rows } = await pool.query<{ id: number; note: string }>(
    'INSERT INTO transfers (note) VALUES ($1) RETURNING id, note',
    [note],
  );
  return rows[0];
}

@Resolver()
class TransfersResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Transfer)
  @Idempotent()
  async createTransfer(@Args('note') note: string): Promise<Transfer> {
    return insert(note);
  }

  @Mutation(() => PlainTransfer)
  @Idempotent()
  async createPlainTransfer(@Args('note') note: string): Promise<PlainTransfer> {
    return insert(note);
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
  providers: [TransfersResolver],
})
class TransfersModule {}

interface Answer {
  data?: { [field: string]: { id: number; note?: string | null } | null } | null;
  errors?: { path?: (string | number)[]; extensions?: { code?: string } }[];
}

describe('adversary 75: a retry selects a field with middleware the first call did not', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75_gql_middleware_unselected', {
      module: TransfersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY, note text NOT NULL)');
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = async (key: string, query: string): Promise<Answer> =>
    (
      await request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Content-Type', 'application/json')
        .set('Idempotency-Key', key)
        .timeout(10_000)
        .send(JSON.stringify({ query }))
    ).body as Answer;

  it('control: without the middleware, the retry is told field_not_stored', async () => {
    const first = await post(
      'adv75-mw-unsel-c',
      'mutation { createPlainTransfer(note: "rent") { id } }',
    );
    expect(first).toEqual({ data: { createPlainTransfer: { id: expect.any(Number) } } });
    const again = await post(
      'adv75-mw-unsel-c',
      'mutation { createPlainTransfer(note: "rent") { id note } }',
    );
    expect(again.errors?.[0]?.extensions?.code).toBe('field_not_stored');
    expect(again.errors?.[0]?.path).toEqual(['createPlainTransfer', 'note']);
  });

  it('with the middleware, the retry is told field_not_stored, never a made-up null', async () => {
    const first = await post(
      'adv75-mw-unsel-a',
      'mutation { createTransfer(note: "rent") { id } }',
    );
    expect(first).toEqual({ data: { createTransfer: { id: expect.any(Number) } } });
    const again = await post(
      'adv75-mw-unsel-a',
      'mutation { createTransfer(note: "rent") { id note } }',
    );
    // Failed: undefined; the answer is { data: { createTransfer: { id, note: null } } }.
    expect(again.errors?.[0]?.extensions?.code).toBe('field_not_stored');
    expect(again.errors?.[0]?.path).toEqual(['createTransfer', 'note']);
  });
});
