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
 * Adversary 75: a field that has Nest field middleware (`@Field({ middleware })`) and whose
 * value the mutation's object gives through a getter of its class (or as a Promise: a TypeORM
 * lazy relation) answers on the first call and is lost on a replay: the replay's parent has no
 * such member, the middleware's `next()` reads `undefined`, and the non-null field fails, so
 * the retry gets `data: null` and an error where the first call got the transfer. Round 74's
 * fix broke it: before it, such a field was read and stored as any field.
 *
 * The app (Nest's docs' logger middleware, on a getter and on a lazy relation):
 *
 *   const logged: FieldMiddleware = async (ctx, next) => {
 *     const value = await next();
 *     seen.push(`${ctx.info.parentType.name}.${ctx.info.fieldName}`);
 *     return value;
 *   };
 *   @ObjectType() class Transfer {
 *     @Field(() => Int) id!: number;
 *     @Field(() => Int) amountCents!: number;
 *     @Field({ middleware: [logged] })
 *     get label(): string { return `Transfer ${this.id}: ${this.amountCents} cents`; }
 *     @Field(() => Account, { middleware: [logged] }) account!: Promise<Account>;
 *   }
 *   @Mutation(() => Transfer) @Idempotent()
 *   async createTransfer(@Args('amountCents', { type: () => Int }) amountCents: number) {
 *     const { rows } = await pool.query('INSERT ... RETURNING id, amount_cents AS "amountCents"');
 *     return Object.assign(new Transfer(), rows[0], { account: Promise.resolve({ ... }) });
 *   }
 *
 * Apollo on Express, the `Idempotency-Key` header; the client selects `{ id label }` (or
 * `{ id account { name } }`).
 *
 * Why: `isResolvedByApp` (lib/graphql/resolved-fields.ts) now takes a field with field
 * middleware (`nestField(...).middleware`) for the app's resolver, like a `@ResolveField()`.
 * `walkObject` (lib/graphql/wire-value.ts) then does not read and store such a field: it keeps
 * only the parent's own data of that name as the resolver's input (`ownValue`), which is
 * undefined for a getter of the class (not an own data property) and refused for a Promise.
 * But the middleware's resolver is Nest's property read behind the middleware
 * (`rootFieldResolver`: `root[field.name]`): on a replay the parent is the stored plain object,
 * which has neither the getter nor the Promise, and the field reads `undefined`.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "A replay's resolvers get
 * the same values as the first call's, and the answer is the same bytes"; "a getter (a signed
 * URL's) and a Promise are read once too ... a replay gives a getter's field through a getter";
 * field middleware "runs again on a replay on the field's stored raw property".
 *
 * Control: the same type and mutation without the middleware on those fields: the replay is
 * the first answer; passes.
 *
 * Regression: this file passes with lib/graphql/{resolved-fields,nest-fields,graphql-module}.ts
 * as they were before round 74's commit ab82ebf (checked out over the current ones).
 *
 * Severity: high (a retry of a committed mutation answers `data: null` with an error, for
 * Nest's documented middleware on an ordinary getter or lazy relation; the client may take it
 * as a failure of the transfer).
 *
 * Failed: `expect(again.body).toEqual(replayOf(first))`: the replay is
 * `{ data: null, errors: [{ message: 'Cannot return null for non-nullable field
 * Transfer.label.' ... }] }`.
 *
 * Suggested fix: a field that is the app's only through middleware still has Nest's property
 * read at its heart: read and store its value as for a plain field (a getter's and a Promise's
 * value included, as `walkObject` does for the others), and keep the parent's unselected data
 * beside it; only a `@ResolveField()` (or a schema resolver of the app's own) should take the
 * parent's raw data of that name as its input instead.
 *
 * Fixed: field middleware is taken for a wrapper of Nest's property read, not for the app's
 * resolver: `fieldResolution` (lib/graphql/resolved-fields.ts) tells a `@Field({ middleware
 * })` (Nest's metadata) or Nest's middleware wrapper in the schema (`resolverKind`, new
 * lib/graphql/resolver-kind.ts, its code read from the installed Nest by `loadNestReaders`)
 * as `middleware`, apart from the app's own resolvers (`app`: `isResolvedByApp`). `walkObject`
 * (lib/graphql/wire-value.ts, `walkValue`) reads and stores such a field as a plain one (the
 * getter's value, the Promise awaited, replayed through a getter and as a Promise), and still
 * keeps its parent's unselected own data for the middleware (adversary 74).
 */
let pool: Pool;
const seen: string[] = [];

/** Nest's docs' logger middleware: reads nothing of its parent, hands the value on. */
const logged: FieldMiddleware = async (ctx, next) => {
  const value: unknown = await next();
  seen.push(`${ctx.info?.parentType.name}.${ctx.info?.fieldName}`);
  return value;
};

@ObjectType()
class Account {
  @Field()
  name!: string;
}

@ObjectType()
class Transfer {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amountCents!: number;

  @Field({ middleware: [logged] })
  get label(): string {
    return `Transfer ${this.id}: ${this.amountCents} cents`;
  }

  /** A TypeORM-style lazy relation. */
  @Field(() => Account, { middleware: [logged] })
  account!: Promise<Account>;
}

@ObjectType()
class PlainTransfer {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amountCents!: number;

  @Field()
  get label(): string {
    return `Transfer ${this.id}: ${this.amountCents} cents`;
  }

  @Field(() => Account)
  account!: Promise<Account>;
}

async function insert(amountCents: number): Promise<{ id: number; amountCents: number }> {
  const { rows } = await pool.query<{ id: number; amountCents: number }>(
    'INSERT INTO transfers (amount_cents) VALUES ($1) RETURNING id, amount_cents AS "amountCents"',
    [amountCents],
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
  async createTransfer(
    @Args('amountCents', { type: () => Int }) amountCents: number,
  ): Promise<Transfer> {
    const row = await insert(amountCents);
    return Object.assign(new Transfer(), row, {
      account: Promise.resolve({ name: `acct_${row.id}` }),
    });
  }

  @Mutation(() => PlainTransfer)
  @Idempotent()
  async createPlainTransfer(
    @Args('amountCents', { type: () => Int }) amountCents: number,
  ): Promise<PlainTransfer> {
    const row = await insert(amountCents);
    return Object.assign(new PlainTransfer(), row, {
      account: Promise.resolve({ name: `acct_${row.id}` }),
    });
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

describe('adversary 75: a field middleware on a getter or a lazy relation, replayed', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv75_gql_middleware_getter', {
      module: TransfersModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query(
          'CREATE TABLE transfers (id serial PRIMARY KEY, amount_cents int NOT NULL)',
        );
      },
    });
  }, 60_000);

  afterAll(() => fixture?.close());

  const post = (key: string, query: string) =>
    request(fixture.app.getHttpServer())
      .post('/graphql')
      .set('Content-Type', 'application/json')
      .set('Idempotency-Key', key)
      .timeout(10_000)
      .send(JSON.stringify({ query }));

  const replayOf = (first: { body: Record<string, unknown> }, field: string) => ({
    ...first.body,
    extensions: { idempotency: { replayed: [field] } },
  });

  const count = async () =>
    Number((await fixture.admin.query('SELECT count(*) AS n FROM transfers')).rows[0].n);

  it('control: without the middleware, the getter and the lazy relation replay as first answered', async () => {
    const query =
      'mutation { createPlainTransfer(amountCents: 100) { id label account { name } } }';
    const before = await count();
    const first = await post('adv75-mw-getter-c', query);
    expect(first.body).toEqual({
      data: {
        createPlainTransfer: {
          id: expect.any(Number),
          label: expect.stringMatching(/^Transfer \d+: 100 cents$/),
          account: { name: expect.stringMatching(/^acct_\d+$/) },
        },
      },
    });
    const again = await post('adv75-mw-getter-c', query);
    expect(again.body).toEqual(replayOf(first, 'createPlainTransfer'));
    expect(await count()).toBe(before + 1);
  });

  it("a getter behind Nest's field middleware: the replay is the first answer", async () => {
    const query = 'mutation { createTransfer(amountCents: 200) { id label } }';
    const before = await count();
    const first = await post('adv75-mw-getter-a', query);
    expect(first.body).toEqual({
      data: {
        createTransfer: {
          id: expect.any(Number),
          label: expect.stringMatching(/^Transfer \d+: 200 cents$/),
        },
      },
    });
    expect(seen).toContain('Transfer.label');
    const again = await post('adv75-mw-getter-a', query);
    // Failed: data null, "Cannot return null for non-nullable field Transfer.label."
    expect(again.body).toEqual(replayOf(first, 'createTransfer'));
    expect(await count()).toBe(before + 1);
  });

  it("a lazy relation behind Nest's field middleware: the replay is the first answer", async () => {
    const query = 'mutation { createTransfer(amountCents: 300) { id account { name } } }';
    const before = await count();
    const first = await post('adv75-mw-getter-b', query);
    expect(first.body).toEqual({
      data: {
        createTransfer: { id: expect.any(Number), account: { name: expect.any(String) } },
      },
    });
    const again = await post('adv75-mw-getter-b', query);
    // Failed: data null, "Cannot return null for non-nullable field Transfer.account."
    expect(again.body).toEqual(replayOf(first, 'createTransfer'));
    expect(await count()).toBe(before + 1);
  });
});
