import { readFileSync } from 'node:fs';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type INestApplication, Module } from '@nestjs/common';
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
import { Client, type Pool } from 'pg';
import request from 'supertest';
import { IdempotencyModule, Idempotent } from '../lib/index.js';
import { bootstrapTestApp } from './support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from './support/database.js';
import { createTestPool, endTestPool } from './support/test-pool.js';

/**
 * Batched GraphQL operations (Apollo's `allowBatchedHttpRequests`, Mercurius'
 * `allowBatchedQueries`: several operations in one HTTP request) share the request's headers.
 * With the key in the `Idempotency-Key` header, two operations of one batch that each make a
 * payment were stored under one record (`<key>:pay`): one payment made, the batch answered
 * [paid {id 1}, key_in_progress] and its retry [paid {id 1}, paid {id 1}] (found by an
 * adversarial review, issue 27). Now a key of the whole request is refused in a batch, each
 * field a key_invalid error saying why, nothing made; a key in each call's argument works.
 */
let pool: Pool;

@ObjectType()
class Payment {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amount!: number;
}

@Resolver(() => Payment)
class PaymentsResolver {
  @Query(() => Int)
  payments(): number {
    return 0;
  }

  @Mutation(() => Payment)
  @Idempotent({ keyFrom: { arg: 'key' } })
  async payKeyed(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('key') _key: string,
  ): Promise<Payment> {
    return this.pay(amount);
  }

  @Mutation(() => Payment)
  @Idempotent()
  async pay(@Args('amount', { type: () => Int }) amount: number): Promise<Payment> {
    const { rows } = await pool.query<{ id: number }>(
      'INSERT INTO payments (amount) VALUES ($1) RETURNING id',
      [amount],
    );
    return { id: rows[0].id, amount };
  }
}

function appModule() {
  @Module({
    imports: [
      GraphQLModule.forRoot<ApolloDriverConfig>({
        driver: ApolloDriver,
        autoSchemaFile: true,
        graphiql: false,
        allowBatchedHttpRequests: true,
      }),
      IdempotencyModule.forRootAsync({ useFactory: () => ({ globalKeys: true, pool }) }),
    ],
    providers: [PaymentsResolver],
  })
  class BatchModule {}
  return BatchModule;
}

describe.each([['apollo']] as const)(
  'batched GraphQL operations under one header key (%s)',
  (driver) => {
    let database: TestDatabase;
    let admin: Client;
    let app: INestApplication;

    beforeAll(async () => {
      database = await createTestDatabase(`graphql_batch_${driver}`);
      admin = new Client({ connectionString: database.url });
      await admin.connect();
      await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
      await admin.query('CREATE TABLE payments (id serial PRIMARY KEY, amount int NOT NULL)');
      pool = createTestPool({ connectionString: database.url, max: 4 });
      app = await bootstrapTestApp(appModule(), driver === 'apollo' ? 'express' : 'fastify');
    });

    afterAll(async () => {
      await app?.close();
      await endTestPool(pool);
      await admin?.end();
      await database?.drop();
    });

    const batch = (operations: { query: string }[]) =>
      request(app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', 'batch-1')
        .set('Content-Type', 'application/json')
        .send(JSON.stringify(operations));
    const made = async () =>
      (await admin.query<{ n: number }>('SELECT count(*)::int AS n FROM payments')).rows[0].n;

    it('refuses the header key in a batch: each operation a key_invalid error saying why, nothing made', async () => {
      const operation = { query: 'mutation { pay(amount: 5) { id amount } }' };
      for (let attempt = 0; attempt < 2; attempt++) {
        const answer = await batch([operation, operation]);
        const results = answer.body as {
          data?: unknown;
          errors?: { message: string; extensions?: { code?: string; status?: number } }[];
        }[];
        expect(results).toHaveLength(2);
        for (const result of results) {
          expect(result.errors?.[0].extensions).toMatchObject({ code: 'key_invalid', status: 400 });
          expect(result.errors?.[0].message).toBe(
            'The Idempotency-Key header is invalid: it is shared by every operation of a ' +
              "batched request (several operations in one HTTP request), so it cannot name each one's " +
              'mutation: give each call its key in an argument (keyFrom: { arg }), or send the ' +
              'operations one per request.',
          );
        }
      }
      expect(await made()).toBe(0);
    });

    it('runs each call of a batch once by the key in its argument, and replays each', async () => {
      const operations = ['k-1', 'k-2'].map((key) => ({
        query: `mutation { payKeyed(amount: 7, key: "${key}") { id amount } }`,
      }));
      const first = await batch(operations);
      const again = await batch(operations);
      expect(first.status).toBe(200);
      const data = (answer: { body: unknown }) =>
        (answer.body as { data: unknown }[]).map((result) => result.data);
      expect(data(again)).toEqual(data(first));
      expect(again.body).toMatchObject([
        { extensions: { idempotency: { replayed: ['payKeyed'] } } },
        { extensions: { idempotency: { replayed: ['payKeyed'] } } },
      ]);
      expect(await made()).toBe(2);
    });
  },
);
