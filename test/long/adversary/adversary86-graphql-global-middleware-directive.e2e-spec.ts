import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Module } from '@nestjs/common';
import {
  Directive,
  Field,
  type FieldMiddleware,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Query,
  Resolver,
} from '@nestjs/graphql';
import { getDirective, MapperKind, mapSchema } from '@graphql-tools/utils';
import {
  defaultFieldResolver,
  DirectiveLocation,
  GraphQLDirective,
  type GraphQLSchema,
} from 'graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Adversary 86 (graphql): the global `buildSchemaOptions.fieldMiddleware` under Apollo, on a
 * field that also carries a schema directive (Nest's own docs' `@upper` example:
 * `@Directive('@upper')` + `transformSchema: (schema) => upperDirectiveTransformer(schema,
 * 'upper')`, a `mapSchema` that wraps the field's resolver). The middleware runs again on a
 * replay (on the mutation's kept value), and the replay answers another value than the first answer.
 *
 * User code: a global field middleware `edition` (appends the catalog edition read at call
 * time: `"WIDGET#1"`); `Order.label` with `@Directive('@upper')`; `createOrder` with
 * `@Idempotent()`; Apollo on Express, code first.
 *
 * Code path: lib/graphql/resolver-kind.ts `noteOwnResolvers` (at `serverWillStart`) notes
 * the directive's wrapper as the field's own resolver, `fieldResolverKind` tells nothing of it
 * (neither Nest's reader nor Nest's middleware wrapper), and lib/graphql/resolved-fields.ts
 * `fieldResolution` falls back to Nest's metadata, which does not know the global middleware:
 * `property`. The field is then not stored as a middleware output; the replay runs the
 * field's resolver (directive -> Nest's global middleware) again.
 *
 * Docs (docs/guides/graphql.md): "a field behind Nest field middleware (`@Field({ middleware
 * })`, or the global `buildSchemaOptions.fieldMiddleware`, under Apollo too ...) is stored as
 * the operation's answer holds it ... and a replay answers that output: the middleware never
 * runs on a replay."
 *
 * Severity: medium: the replay of a committed order does not answer the first answer (the
 * middleware's output is made anew: `WIDGET#2`), and whatever the
 * middleware does (an audit, a lookup) runs on every replay.
 *
 * Fails now: replay `label: "WIDGET#2"` (first answer `"WIDGET#1"`): the middleware ran again.
 * The same app on Mercurius (`jit: 1`, Fastify) fails the same way (verified in review): the
 * fall-back to Nest's metadata is the driver-independent part.
 * Control (passes): the same global middleware on `note`, a field without the directive.
 *
 * Suggested fix: tell the global middleware by Nest's own record of it
 * (`buildSchemaOptions.fieldMiddleware` non-empty: every code-first object field is behind it)
 * rather than by the resolver's code, or see through any wrapper by calling through it.
 *
 * Fixed (session of 2026-12-06, third): the library reads Nest's own record at start-up (the
 * `GqlModuleOptions` provider's `buildSchemaOptions.fieldMiddleware`, in
 * lib/routes/idempotent-routes.check.ts `onModuleInit` -> `noteGlobalFieldMiddleware`), and
 * `fieldResolution` (lib/graphql/resolved-fields.ts, the pure `resolutionFrom` with its
 * table-driven spec) tells every code-first `@Field()` Nest built as `middleware` when it is
 * set, whatever wraps its resolver (a `@ResolveField()` stays the app's). `label`'s output,
 * after the directive, is stored and replayed: `WIDGET#1`. Checked on Apollo here; the
 * Mercurius variant was not rerun in this session (the read is driver-independent).
 * Docs: docs/guides/graphql.md, "Field middleware".
 */
let pool: Pool;
let edition = 1;

/** Nest's global field middleware: the catalog edition the caller saw it in. */
const editionMiddleware: FieldMiddleware = async (_ctx, next) => {
  const value: unknown = await next();
  return typeof value === 'string' ? `${value}#${edition}` : value;
};

/** Nest's docs' `upperDirectiveTransformer`. */
function upperDirectiveTransformer(schema: GraphQLSchema, directiveName: string) {
  return mapSchema(schema, {
    [MapperKind.OBJECT_FIELD]: (fieldConfig) => {
      const upper = getDirective(schema, fieldConfig, directiveName)?.[0];
      if (upper) {
        const { resolve = defaultFieldResolver } = fieldConfig;
        fieldConfig.resolve = async function (source, args, context, info) {
          const result: unknown = await resolve(source, args, context, info);
          return typeof result === 'string' ? result.toUpperCase() : result;
        };
      }
      return fieldConfig;
    },
  });
}

@ObjectType()
class Order {
  @Field(() => Int)
  id!: number;

  @Directive('@upper')
  @Field()
  label!: string;

  @Field()
  note!: string;
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
    return { id: rows[0].id, label: 'widget', note: 'gift' };
  }
}

@Module({
  imports: [
    IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    GraphQLModule.forRoot<ApolloDriverConfig>({
      driver: ApolloDriver,
      autoSchemaFile: true,
      graphiql: false,
      transformSchema: (schema: GraphQLSchema) => upperDirectiveTransformer(schema, 'upper'),
      buildSchemaOptions: {
        fieldMiddleware: [editionMiddleware],
        directives: [
          new GraphQLDirective({ name: 'upper', locations: [DirectiveLocation.FIELD_DEFINITION] }),
        ],
      },
    }),
  ],
  providers: [OrdersResolver],
})
class OrdersModule {}

describe('adversary 86: global field middleware on a field with a schema directive (Apollo)', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv86_gql_global_mw_directive', {
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

  const orders = async () =>
    (await pool.query<{ n: number }>('SELECT count(*)::int AS n FROM orders')).rows[0].n;

  const replayOf = async (key: string, query: string, field: string, shown: string) => {
    edition = 1;
    const before = await orders();
    const firstAnswer = await post(key, query);
    expect(firstAnswer.body.data.createOrder[field]).toBe(shown);
    edition = 2;
    const again = await post(key, query);
    expect(again.body).toEqual({
      ...firstAnswer.body,
      extensions: { ...firstAnswer.body.extensions, idempotency: { replayed: ['createOrder'] } },
    });
    expect(await orders()).toBe(before + 1);
  };

  it('control: the global middleware on a field without a directive: its output replayed', async () => {
    await replayOf('adv86-global-note', 'mutation { createOrder { id note } }', 'note', 'gift#1');
  });

  it('the global middleware on a field with @upper: its output replayed', async () => {
    await replayOf(
      'adv86-global-label',
      'mutation { createOrder { id label } }',
      'label',
      'WIDGET#1',
    );
  });
});
