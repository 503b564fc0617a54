import { jest } from '@jest/globals';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { Logger, Module } from '@nestjs/common';
import {
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
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

/**
 * Fixed (session of 2026-12-07): same root cause as tojson-spread-endless: lib/graphql/
 * typed-graph.ts `cell()` calls `toJSON()` once and writes what it gives as its own data; a
 * `toJSON()` giving the object itself is written as its own members (its class still said
 * lost in the log, as for any class with methods), never taken for a cycle (an object already
 * written leads nowhere new; the guard asks only whether the place is inside an object the
 * same `toJSON()` gave). Specs: lib/graphql/typed-graph.spec.ts.
 *
 * Adversary 105 (graphql): an object whose `toJSON()` gives the object itself (`toJSON() {
 * return this }`: a subclass opting out of a base entity's `toJSON()` that would hide
 * columns, or a value object saying "write me as my data") is taken for "a cycle through
 * toJSON()" and left out of the kept data: JSON.stringify writes it at once, as its own data.
 * The library's loop calls `toJSON()` again on what it gave (itself) 1,000 times, then throws
 * its cycle error; the member is left out and the log says it has "no JSON form". A replay's
 * `@ResolveField()` reading it then reads undefined: the first answer says `"EUR"`, every
 * replay `"unknown"`.
 *
 * User code: `class BaseEntity { toJSON() { return { id: this.id } } }`; `class Currency
 * extends BaseEntity { code; toJSON() { return this } }`; `@ObjectType() class Invoice {
 * @Field(() => Int) id }`; `@Mutation(() => Invoice) @Idempotent() invoice()` returning the
 * row with `currency: new Currency('EUR')` (no field); `@ResolveField(() => String)
 * currencyCode(@Parent() i) { return i.currency?.code ?? 'unknown' }`; Apollo.
 *
 * Code path: lib/graphql/typed-graph.ts `writeGraph` `cell()`: `while (hasOwnToJson(target))
 * { json = target.toJSON(); ...; if (isJsonCycle(jsonCalls, target)) throw new Error('a cycle
 * through toJSON()'); target = json }` -- `json === target` loops on the same object; the
 * root-member loop's catch leaves it out (`notes.left`), lib/graphql/kept-data.ts `keepData`
 * names it "with no JSON form".
 *
 * Docs quote (docs/guides/graphql.md): "what a class has more (its methods and getters, a
 * `toJSON()` that is written instead, as for a `Decimal`) ... are not there as they were"; only
 * a member with no typed JSON form is left out: "a cycle through a `toJSON()`: one giving a new
 * object that holds it again, 1,000 times over".
 *
 * Severity: medium (a replay answers another value at the field; the log says, wrongly, that
 * the value has no JSON form; the effect is not repeated).
 *
 * Fails now (un-skipped): first `currencyCode: "EUR"`, replay `currencyCode: "unknown"`.
 *
 * Controls: JSON.stringify writes the value as `{"code":"EUR"}`; the same class without the
 * `toJSON()` override (a plain data class) replays `"EUR"`.
 *
 * Suggested fix: call `toJSON()` once per place, as JSON does (`SerializeJSONProperty` never
 * calls the result's `toJSON()`): write what it gives as its own data; at least stop where it
 * gives the object itself.
 */
let pool: Pool;

class BaseEntity {
  toJSON(): unknown {
    return {};
  }
}

class Currency extends BaseEntity {
  constructor(readonly code: string) {
    super();
  }

  override toJSON(): unknown {
    return this;
  }
}

class PlainCurrency {
  constructor(readonly code: string) {}
}

@ObjectType()
class Invoice {
  @Field(() => Int)
  id!: number;
}

type InvoiceRow = Invoice & { currency?: { code?: string } };

@Resolver(() => Invoice)
class InvoicesResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Invoice)
  @Idempotent()
  async invoice(): Promise<InvoiceRow> {
    return Object.assign(await this.insert(), { currency: new Currency('EUR') });
  }

  @Mutation(() => Invoice)
  @Idempotent()
  async invoicePlain(): Promise<InvoiceRow> {
    return Object.assign(await this.insert(), { currency: new PlainCurrency('EUR') });
  }

  @ResolveField(() => String)
  currencyCode(@Parent() invoice: InvoiceRow): string {
    return invoice.currency?.code ?? 'unknown';
  }

  private async insert(): Promise<Invoice> {
    const { rows } = await pool.query<Invoice>('INSERT INTO invoices DEFAULT VALUES RETURNING id');
    return rows[0];
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
  providers: [InvoicesResolver],
})
class InvoicesModule {}

describe('adversary 105: a toJSON() giving the object itself is taken for a cycle', () => {
  let fixture: PoolApp;

  beforeAll(async () => {
    fixture = await startPoolApp('adv105_gql_tojson_this', {
      module: InvoicesModule,
      max: 6,
      usePool: (started) => (pool = started),
      setup: async (admin) => {
        await admin.query('CREATE TABLE invoices (id serial PRIMARY KEY)');
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

  it('control: JSON.stringify writes it as its own data', () => {
    expect(JSON.stringify({ currency: new Currency('EUR') })).toBe('{"currency":{"code":"EUR"}}');
  });

  it('control: a plain data class replays the same answer', async () => {
    const query = 'mutation { invoicePlain { id currencyCode } }';
    const first = await post('adv105-this-plain', query);
    const again = await post('adv105-this-plain', query);
    expect(first.body.data.invoicePlain.currencyCode).toBe('EUR');
    expect(again.body.data).toEqual(first.body.data);
  });

  it('a toJSON() giving itself is kept as JSON writes it', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const query = 'mutation { invoice { id currencyCode } }';
      const first = await post('adv105-this', query);
      const again = await post('adv105-this', query);
      // eslint-disable-next-line no-console
      console.log('THIS', first.text, again.text, JSON.stringify(warn.mock.calls));
      expect(first.body.data.invoice.currencyCode).toBe('EUR');
      expect(again.body.data).toEqual(first.body.data);
    } finally {
      warn.mockRestore();
    }
  });
});
