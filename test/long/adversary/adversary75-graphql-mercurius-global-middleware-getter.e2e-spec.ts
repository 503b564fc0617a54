import { jest } from '@jest/globals';
import { Module, type Type } from '@nestjs/common';
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
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary 75: on Mercurius, Nest's global field middleware (`buildSchemaOptions:
 * { fieldMiddleware: [loggerMiddleware] }`, the example of Nest's "Field middleware" page)
 * makes every field of the schema look like the app's own resolver, so every field an
 * idempotent mutation's object gives through a getter of its class, or as a Promise (a
 * TypeORM lazy relation), is lost on a replay: the retry of a committed mutation answers
 * `data: null` with "Cannot return null for non-nullable field". The same root cause as
 * adversary75-graphql-middleware-getter-lost (there a `@Field({ middleware })`, told by
 * Nest's metadata), reached here through the other half of round 74's fix, the schema's
 * resolvers read by `isAppResolver`: one middleware line in the module breaks every getter.
 *
 * The app:
 *
 *   const logged: FieldMiddleware = async (ctx, next) => {
 *     const value = await next();
 *     seen.push(`${ctx.info.parentType.name}.${ctx.info.fieldName}`);
 *     return value;
 *   };
 *   GraphQLModule.forRoot<MercuriusDriverConfig>({ driver: MercuriusDriver,
 *     autoSchemaFile: true, buildSchemaOptions: { fieldMiddleware: [logged] } })
 *   @ObjectType() class Transfer {
 *     @Field(() => Int) id!: number;
 *     @Field(() => Int) amountCents!: number;
 *     @Field() get label(): string { return `Transfer ${this.id}: ${this.amountCents} cents`; }
 *     @Field(() => Account) account!: Promise<Account>;
 *   }
 *   @Mutation(() => Transfer) @Idempotent() createTransfer(...) {
 *     ... return Object.assign(new Transfer(), row, { account: Promise.resolve({...}) });
 *   }
 *
 * Why: with `fieldMiddleware`, Nest gives every field the resolver
 * `decorateFieldResolverWithMiddleware` makes, whose code is not the plain reader's, so
 * `isAppResolver` (lib/graphql/resolved-fields.ts) names every field the app's
 * (`isResolvedByApp`). `walkObject` (lib/graphql/wire-value.ts) then stores none of the
 * selected fields: it keeps each one's parent's own data of that name as the resolver's input
 * (`ownValue`), which is nothing for a getter of the class and refused for a Promise. The
 * middleware's `next()` is Nest's property read: on the replay's stored plain object the
 * getter and the Promise are not there, and the non-null fields read `undefined`.
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "A replay's resolvers get
 * the same values as the first call's, and the answer is the same bytes"; a getter and a
 * Promise "are read once", and "a replay gives a getter's field through a getter"; field
 * middleware "runs again on a replay on the field's stored raw property". The docs name the
 * global `fieldMiddleware` as unseen behind Apollo only; on Mercurius it is seen.
 *
 * Control: the same app without the global middleware: the replay is the first answer;
 * passes.
 *
 * Regression: this file passes with lib/graphql/{resolved-fields,nest-fields,graphql-module}.ts
 * as they were before round 74's commit ab82ebf (checked out over the current ones).
 *
 * Severity: high (every retry of a committed mutation whose answer holds a getter or a lazy
 * relation answers `data: null` with an error, for one line of Nest's documented setup).
 *
 * Failed: `expect(again.body).toEqual(replayOf(first))`: the replay is `{ data: null,
 * errors: [{ message: 'Cannot return null for non-nullable field Transfer.label.' ... }] }`.
 *
 * Suggested fix: a field whose resolver is Nest's property read behind middleware (global or
 * its own) still reads its parent's property: read and store its value as for a plain field
 * (through its getter, its Promise awaited), keep the parent's unselected data beside it for
 * the middleware, and answer the replay's property from what was stored.
 *
 * Fixed: `resolverKind` (new lib/graphql/resolver-kind.ts) knows the code of Nest's middleware
 * wrapper (`decorateFieldResolverWithMiddleware`, read from the installed Nest's factory by
 * `loadNestReaders`) and names it `middleware`, not the app's; `fieldResolution`
 * (lib/graphql/resolved-fields.ts) passes that on, and `walkValue` (lib/graphql/wire-value.ts)
 * stores each such field as a plain one (getter read, Promise awaited), keeping its parent's
 * unselected own data beside it.
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

  @Field()
  get label(): string {
    return `Transfer ${this.id}: ${this.amountCents} cents`;
  }

  /** A TypeORM-style lazy relation. */
  @Field(() => Account)
  account!: Promise<Account>;
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
    const { rows } = await pool.query<{ id: number; amountCents: number }>(
      'INSERT INTO transfers (amount_cents) VALUES ($1) RETURNING id, amount_cents AS "amountCents"',
      [amountCents],
    );
    return Object.assign(new Transfer(), rows[0], {
      account: Promise.resolve({ name: `acct_${rows[0].id}` }),
    });
  }
}

function moduleWith(fieldMiddleware: FieldMiddleware[]): Type {
  @Module({
    imports: [
      IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
      GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
        buildSchemaOptions: { fieldMiddleware },
      }),
    ],
    providers: [TransfersResolver],
  })
  class TransfersModule {}
  return TransfersModule;
}

const replayOf = (first: { body: Record<string, unknown> }) => ({
  ...first.body,
  extensions: { idempotency: { replayed: ['createTransfer'] } },
});

/** Starts the app, runs `body` against it, closes it. */
async function withApp(
  name: string,
  fieldMiddleware: FieldMiddleware[],
  body: (
    post: (key: string, query: string) => request.Test,
    count: () => Promise<number>,
  ) => Promise<void>,
): Promise<void> {
  const fixture: PoolApp = await startPoolApp(name, {
    module: moduleWith(fieldMiddleware),
    adapter: 'fastify',
    max: 6,
    usePool: (started) => (pool = started),
    setup: async (admin) => {
      await admin.query(
        'CREATE TABLE transfers (id serial PRIMARY KEY, amount_cents int NOT NULL)',
      );
    },
  });
  try {
    const post = (key: string, query: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Content-Type', 'application/json')
        .set('Idempotency-Key', key)
        .timeout(10_000)
        .send(JSON.stringify({ query }));
    const count = async () =>
      Number((await fixture.admin.query('SELECT count(*) AS n FROM transfers')).rows[0].n);
    await body(post, count);
  } finally {
    await fixture.close();
  }
}

const QUERY = 'mutation { createTransfer(amountCents: 100) { id label account { name } } }';

const firstAnswer = {
  data: {
    createTransfer: {
      id: expect.any(Number),
      label: expect.stringMatching(/^Transfer \d+: 100 cents$/),
      account: { name: expect.stringMatching(/^acct_\d+$/) },
    },
  },
};

describe("adversary 75: Mercurius with Nest's global field middleware, a getter replayed", () => {
  it('control: without the global middleware, the replay is the first answer', async () => {
    await withApp('adv75_gql_merc_global_mw_c', [], async (post, count) => {
      const first = await post('adv75-merc-global-c', QUERY);
      expect(first.body).toEqual(firstAnswer);
      const again = await post('adv75-merc-global-c', QUERY);
      expect(again.body).toEqual(replayOf(first));
      expect(await count()).toBe(1);
    });
  }, 60_000);

  it("with Nest's documented global logger middleware, the replay is the first answer", async () => {
    await withApp('adv75_gql_merc_global_mw_a', [logged], async (post, count) => {
      const first = await post('adv75-merc-global-a', QUERY);
      expect(first.body).toEqual(firstAnswer);
      expect(seen).toContain('Transfer.label');
      const again = await post('adv75-merc-global-a', QUERY);
      // Failed: data null, "Cannot return null for non-nullable field Transfer.label."
      expect(again.body).toEqual(replayOf(first));
      expect(await count()).toBe(1);
    });
  }, 60_000);
});
