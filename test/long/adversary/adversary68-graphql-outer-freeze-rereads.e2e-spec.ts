import { jest } from '@jest/globals';
import {
  type CallHandler,
  type ExecutionContext,
  Injectable,
  Module,
  type NestInterceptor,
} from '@nestjs/common';
import { APP_INTERCEPTOR } from '@nestjs/core';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type MercuriusDriverConfig } from '@nestjs/mercurius';
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
import { type Pool } from 'pg';
import { map, type Observable } from 'rxjs';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { type GraphqlDriverName } from '../../support/graphql-app.js';
import { type PoolApp, startPoolApp } from '../../support/pool-app.js';

// Mercurius loads @fastify/static, an ES module jest's CommonJS loader cannot require.
jest.mock('@fastify/static', () => () => undefined);
const { GRAPHQL_DRIVERS } = await import('../../support/graphql-app.js');
const { MercuriusDriver } = await import('@nestjs/mercurius');

/**
 * Adversary, round 68: the round-66 fix for an outer layer's `Object.freeze()` / `Object.seal()`
 * of a first answer (the Proxy's `preventExtensions` trap "settles" its stand-in with the
 * value's properties, read fields as answered) is undone by the very next step of the freeze:
 * the first answer then READS AGAIN every own field the library had read, and answers what the
 * store does not hold.
 *
 * The app: `Receipt { id, amount, lines, attachment }` where `lines` is a `Map`'s `values()` (a
 * one-shot iterator: GraphQL takes any iterable) and `attachment` an `Attachment` whose
 * `@Field() get url()` signs a download link afresh on each read (adversary 58's case). An
 * interceptor outside `@Idempotent()` freezes each answer as it caches it (adversary 66's
 * `FreezeAnswers`; `Object.seal` alike).
 *
 * What happens: `Object.freeze(proxy)` is [[PreventExtensions]] (the trap settles: the stand-in
 * gets `lines` = the list read, `attachment` = the Proxy over the attachment) and THEN a
 * [[DefineOwnProperty]] `{ configurable: false, writable: false }` per own key. The Proxy's
 * `defineProperty` trap (`over` in lib/graphql/wire-value.ts) does `given.delete(property)` and
 * `follow(property)`, which copies the VALUE's own descriptor over the stand-in's settled one:
 * from then on `lines` is the resolver's iterator, drained by storing (the first answer
 * `lines: []`), and `attachment` the resolver's own `Attachment`, not the Proxy that answers
 * the url read, so GraphQL calls `get url()` again: the first answer's link is another
 * signature than the stored one, which every replay answers. (Only a class getter of the top
 * value survives, being no own key: adversary 66's case.)
 *
 * Expected (docs/guides/graphql.md, "What is stored, and replayed"): "a generator or a `Map`'s
 * `values()` is read once, and the first answer is given the list that was read and stored; a
 * getter (a signed URL's) [...] read once too, and the first answer is given what was read
 * [...] never read again"; "`Object.freeze()` of it freezes the value"; first answer and replay
 * the same bytes but the replay marker.
 *
 * Controls (pass): without `@Idempotent()` the frozen answer has the lines (and one signature);
 * with the library and no freezing interceptor, the first answer and its replay are the same.
 *
 * Severity: medium (a committed mutation's first answer differs from the stored answer: an
 * empty list, a link that is not the one replays give; in an app that freezes what it caches).
 *
 * Fixed: the Proxy's `defineProperty` trap keeps a read field's answer where only attributes
 * change (`Object.freeze` making each key read-only), on the stand-in too.
 */
let pool: Pool;
let signatures = 0;
let freeze: ((value: object) => object) | undefined;

@ObjectType()
class Attachment {
  @Field(() => Int)
  id: number;

  /** A download link, signed on each read. */
  @Field()
  get url(): string {
    signatures += 1;
    return `https://files.example/${this.id}?sig=${signatures}`;
  }

  constructor(id: number) {
    this.id = id;
  }
}

@ObjectType()
class Receipt {
  @Field(() => Int)
  id: number;

  @Field(() => Int)
  amount: number;

  @Field(() => [String])
  lines: Iterable<string>;

  @Field(() => Attachment)
  attachment: Attachment;

  constructor(id: number, amount: number) {
    this.id = id;
    this.amount = amount;
    this.lines = new Map([
      ['a', `${amount} EUR`],
      ['b', 'VAT 20%'],
    ]).values();
    this.attachment = new Attachment(id);
  }
}

/** The app's read-model cache: every answer frozen as it is cached, then sent. */
@Injectable()
class FreezeAnswers implements NestInterceptor {
  intercept(_context: ExecutionContext, next: CallHandler): Observable<unknown> {
    return next
      .handle()
      .pipe(
        map((value: unknown) =>
          freeze && typeof value === 'object' && value !== null ? freeze(value) : value,
        ),
      );
  }
}

async function insert(amount: number): Promise<number> {
  const { rows } = await pool.query<{ id: number }>(
    'INSERT INTO receipts (amount) VALUES ($1) RETURNING id',
    [amount],
  );
  return rows[0].id;
}

@Resolver()
class ReceiptsResolver {
  @Query(() => Int)
  ping(): number {
    return 1;
  }

  @Mutation(() => Receipt)
  @Idempotent()
  async pay(@Args('amount', { type: () => Int }) amount: number): Promise<Receipt> {
    return new Receipt(await insert(amount), amount);
  }

  /** The same, without @Idempotent(): what the app answers without the library. */
  @Mutation(() => Receipt)
  async payUnkeyed(@Args('amount', { type: () => Int }) amount: number): Promise<Receipt> {
    return new Receipt(await insert(amount), amount);
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

const freezers: Record<string, ((value: object) => object) | undefined> = {
  freeze: (value) => Object.freeze(value),
  seal: (value) => Object.seal(value),
};

describe.each(GRAPHQL_DRIVERS)(
  'adversary 68: an outer freeze reads the first answer again, on %s',
  (driver) => {
    let fixture: PoolApp;
    const base = driver === 'apollo' ? 3000 : 4000;

    beforeAll(async () => {
      @Module({
        imports: [
          IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
          graphqlModule(driver),
        ],
        providers: [ReceiptsResolver, { provide: APP_INTERCEPTOR, useClass: FreezeAnswers }],
      })
      class ReceiptsModule {}
      fixture = await startPoolApp(`adv68_freeze_${driver}`, {
        module: ReceiptsModule,
        adapter: driver === 'apollo' ? 'express' : 'fastify',
        max: 4,
        usePool: (started) => (pool = started),
        setup: async (owner) => {
          await owner.query('CREATE TABLE receipts (id serial PRIMARY KEY, amount int NOT NULL)');
        },
      });
    }, 60_000);

    afterEach(() => {
      freeze = undefined;
    });

    afterAll(async () => {
      await fixture?.close();
    });

    const send = (key: string, query: string) =>
      request(fixture.app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', key)
        .timeout(5_000)
        .send({ query });
    const rows = async (amount: number) =>
      Number(
        (await fixture.admin.query('SELECT count(*) FROM receipts WHERE amount = $1', [amount]))
          .rows[0].count,
      );
    const selection = '{ id amount lines attachment { id url } }';
    const receipt = (field: string, amount: number) => ({
      data: {
        [field]: {
          id: expect.any(Number),
          amount,
          lines: [`${amount} EUR`, 'VAT 20%'],
          attachment: {
            id: expect.any(Number),
            url: expect.stringMatching(/^https:\/\/files\.example\/\d+\?sig=\d+$/),
          },
        },
      },
    });

    it('control: without @Idempotent(), the frozen answer has its lines, one signature', async () => {
      freeze = freezers.freeze;
      const amount = base + 1;
      const before = signatures;
      const answer = await send(
        `${driver}-unkeyed`,
        `mutation { payUnkeyed(amount: ${amount}) ${selection} }`,
      );
      expect(answer.body).toEqual(receipt('payUnkeyed', amount));
      expect(signatures - before).toBe(1);
    });

    it('control: with @Idempotent() and no freezing, the first answer is its replay', async () => {
      const amount = base + 2;
      const query = `mutation { pay(amount: ${amount}) ${selection} }`;
      const first = await send(`${driver}-plain`, query);
      const replay = await send(`${driver}-plain`, query);
      expect(first.body).toEqual(receipt('pay', amount));
      expect(replay.body).toEqual({
        ...(first.body as object),
        extensions: { idempotency: { replayed: ['pay'] } },
      });
      expect(await rows(amount)).toBe(1);
    });

    it.each(Object.keys(freezers))(
      'an outer %s: the first answer is the stored answer its replay gives',
      async (how) => {
        freeze = freezers[how];
        const amount = base + 10 + Object.keys(freezers).indexOf(how);
        const query = `mutation { pay(amount: ${amount}) ${selection} }`;
        const first = await send(`${driver}-${how}`, query);
        const replay = await send(`${driver}-${how}`, query);
        expect(await rows(amount)).toBe(1);
        expect(replay.body).toEqual({
          ...receipt('pay', amount),
          extensions: { idempotency: { replayed: ['pay'] } },
        });
        // Fails: the first answer has `lines: []` (the drained iterator) and an attachment url
        // signed again (`sig=N+1`), where the store and every replay hold the lines and `sig=N`.
        expect(first.body).toEqual({
          data: (replay.body as { data: unknown }).data,
        });
      },
    );
  },
);
