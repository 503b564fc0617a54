import { jest } from '@jest/globals';
import { Module } from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
import {
  Args,
  Field,
  GraphQLModule,
  Int,
  Mutation,
  ObjectType,
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 62: a mutation's model with an ES `#private` field, a field given through
 * a getter, and a `@ResolveField()` that reads its parent through the class (a getter or a
 * method over the private field): under `@Idempotent()` the field resolver fails at the first
 * answer, "Cannot read private member #cents from an object whose class did not declare it",
 * once the operation also selects the getter field. Without the library, or without that
 * getter field selected, it answers.
 *
 * The app (Apollo on Express, Mercurius on Fastify; the pool seam), a domain class with its
 * invariant kept private, and a computed field of its own resolver class:
 *
 *   @ObjectType() class Invoice {
 *     #cents: number;
 *     @Field(() => Int) id: number;
 *     @Field() get total(): string { return (this.#cents / 100).toFixed(2); }
 *     get cents(): number { return this.#cents; }
 *   }
 *   @Resolver(() => Invoice) class InvoiceFields {
 *     @ResolveField(() => Int) vatCents(@Parent() invoice: Invoice) { return ... invoice.cents ...; }
 *   }
 *   mutation { issueInvoice(ref: "...") { id total vatCents } }
 *
 * What happens: `outputWire` reads `total` through the class's getter (on the resolver's own
 * Invoice: it works), so since 846930c the first answer is `over(source, replaced)`
 * (lib/graphql/wire-value.ts, `over`): `Object.create(Invoice.prototype)` with the source's own
 * property descriptors, `total` laid over it. That copy is an Invoice by its prototype but was
 * never constructed, so it has no `#cents` slot. GraphQL hands the copy to `vatCents` as its
 * parent; `invoice.cents` runs the class's getter on the copy, and `this.#cents` throws a
 * TypeError: `vatCents` answers null with that error (`Int!`: the whole `issueInvoice` is
 * null, `data: null`), after the invoice committed. A method (`invoice.vat()`) over the
 * private field, a `resolveType()` reading one, or a serializer's exposed getter fail the same
 * way. Before 846930c, a getter field did not make a copy.
 *
 * Expected: "The first call gets the resolver's own value (its `Date`s, its class
 * instances)" (docs/guides/graphql.md, "What is stored, and replayed"; run-field.ts: "the first
 * answer is the resolver's own value (its Dates, its class instances, which the fields'
 * resolvers may read)"). The doc warns that a replay is not an instance, so that "no getter or
 * method of the class runs on the replay's data (one reading ... an ES `#private` field, would
 * throw)"; it says nothing of the first answer, which should answer as without the library.
 *
 * Controls: the same operation on the same mutation without `@Idempotent()` answers
 * `vatCents`; under `@Idempotent()`, the same mutation with `total` not selected (no copy)
 * answers it too. Both pass on both drivers.
 *
 * Severity: medium (the first answer of a committed mutation is an error, `data: null`, where
 * the app without the library answers; a class with private state and a computed field is a
 * common domain-model shape).
 *
 * Fixed: the Proxy runs getters and methods on the value itself, whose private fields are its
 * own.
 */
let pool: Pool;

@ObjectType()
class Invoice {
  #cents: number;

  @Field(() => Int)
  id: number;

  @Field(() => String)
  get total(): string {
    return (this.#cents / 100).toFixed(2);
  }

  get cents(): number {
    return this.#cents;
  }

  constructor(id: number, cents: number) {
    this.id = id;
    this.#cents = cents;
  }
}

async function insert(ref: string): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO invoices (ref) VALUES ($1) RETURNING id',
    [ref],
  );
  return rows[0].id;
}

@Resolver(() => Invoice)
class InvoicesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Invoice)
  @Idempotent()
  async issueInvoice(@Args('ref') ref: string): Promise<Invoice> {
    return new Invoice(await insert(ref), 12_345);
  }

  /** The same, without the library. */
  @Mutation(() => Invoice)
  async issuePlainInvoice(@Args('ref') ref: string): Promise<Invoice> {
    return new Invoice(await insert(ref), 12_345);
  }

  @ResolveField(() => Int)
  vatCents(@Parent() invoice: Invoice): number {
    return Math.round(invoice.cents * 0.2);
  }
}

function graphqlModule(driver: GraphqlDriverName) {
  return driver === 'apollo'
    ? GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
      })
    : GraphQLModule.forRoot<MercuriusDriverConfig>({
        driver: MercuriusDriver,
        autoSchemaFile: true,
        graphiql: false,
      });
}

describe.each(GRAPHQL_DRIVERS)(
  'adversary 62: a #private field read by a field resolver of the first answer, on %s',
  (driver) => {
    let fixture: PoolApp;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [InvoicesResolver],
      })
      class InvoicesModule {}
      fixture = await startPoolApp(`adv62_private_field_${driver}`, {
        module: InvoicesModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE invoices (id serial PRIMARY KEY, ref text NOT NULL)');
        },
      });
    }, 60_000);

    afterAll(async () => {
      await fixture?.close();
    });

    const send = (key: string, query: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .timeout(5_000)
        .send({ query });
    const rows = async (ref: string) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM invoices WHERE ref = $1', [ref])).rows[0]
          .count,
      );

    it('control: without the library, the field resolver reads its parent', async () => {
      const ref = `${driver}-plain`;
      const answer = await send(
        ref,
        `mutation { issuePlainInvoice(ref: "${ref}") { id total vatCents } }`,
      );
      expect(answer.body).toEqual({
        data: { issuePlainInvoice: { id: expect.any(Number), total: '123.45', vatCents: 2469 } },
      });
    });

    it('control: under @Idempotent(), total not selected: the field resolver reads it', async () => {
      const ref = `${driver}-ctl`;
      const answer = await send(ref, `mutation { issueInvoice(ref: "${ref}") { id vatCents } }`);
      expect(answer.body).toEqual({
        data: { issueInvoice: { id: expect.any(Number), vatCents: 2469 } },
      });
      expect(await rows(ref)).toBe(1);
    });

    it('under @Idempotent(), total selected: the first answer is what the app answers', async () => {
      const ref = `${driver}-total`;
      const answer = await send(
        ref,
        `mutation { issueInvoice(ref: "${ref}") { id total vatCents } }`,
      );
      expect(answer.body).toEqual({
        data: { issueInvoice: { id: expect.any(Number), total: '123.45', vatCents: 2469 } },
      });
      expect(await rows(ref)).toBe(1);
    });
  },
);
