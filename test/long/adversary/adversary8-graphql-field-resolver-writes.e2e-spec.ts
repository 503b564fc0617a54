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
  Parent,
  Query,
  ResolveField,
  Resolver,
} from '@nestjs/graphql';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { IDEMPOTENCY_MIGRATIONS, IdempotencyModule, Idempotent } from '../../../lib/index.js';
import { bootstrapTestApp } from '../../support/bootstrap.js';
import { createTestDatabase, type TestDatabase } from '../../support/database.js';

/**
 * Adversary, round 8: a `@ResolveField()` under an idempotent mutation that writes (the
 * transfer's receipt, issued when the client selects it: `createTransfer(amount: 9) { id
 * receipt }`). The mutation's transaction commits before GraphQL resolves the fields under its
 * value, so the field resolver runs outside it, on its own; and a replay gives the stored
 * value to GraphQL, which runs the field resolver again. Each retry of the key (the client did
 * not get the first answer) issues one more receipt, and answers another receipt number: three
 * calls with one key, three receipts, three different answers.
 * Without the library the request is not retried safely at all; with it the promise is that
 * the operation's database effects happen once per key and every answer after the first is the
 * same. Expected: one receipt, and the replays answer the first answer's `receipt`; or the
 * write refused in the field resolver under a replay, clearly. (graphql.md says a
 * `@ResolveField()` runs again on a replay; it does not say its writes are repeated.)
 */
@ObjectType()
class Transfer {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amount!: number;
}

@Resolver(() => Transfer)
class TransfersResolver {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  @Query(() => Int)
  ping() {
    return 1;
  }

  @Mutation(() => Transfer)
  @Idempotent()
  async createTransfer(@Args('amount', { type: () => Int }) amount: number): Promise<Transfer> {
    const rows = (await this.dataSource.query(
      'INSERT INTO transfers (amount) VALUES ($1) RETURNING id',
      [amount],
    )) as { id: number }[];
    return { id: rows[0].id, amount };
  }

  /** The transfer's receipt, issued when first asked for. */
  @ResolveField(() => Int)
  async receipt(@Parent() transfer: Transfer): Promise<number> {
    const rows = (await this.dataSource.query(
      'INSERT INTO receipts (transfer_id) VALUES ($1) RETURNING id',
      [transfer.id],
    )) as { id: number }[];
    return rows[0].id;
  }
}

describe('adversary 8: GraphQL, a field resolver under an idempotent mutation that writes', () => {
  let database: TestDatabase;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    database = await createTestDatabase('adv8_graphql_field_writes');
    admin = new Client({ connectionString: database.url });
    await admin.connect();
    await admin.query(readFileSync('migrations/schema.sql', 'utf8'));
    await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY, amount int NOT NULL)');
    await admin.query('CREATE TABLE receipts (id serial PRIMARY KEY, transfer_id int NOT NULL)');

    @Module({
      imports: [
        TypeOrmModule.forRoot({
          type: 'postgres',
          url: database.url,
          migrations: [...IDEMPOTENCY_MIGRATIONS],
          migrationsRun: false,
          extra: { max: 4 },
        }),
        IdempotencyModule.forRoot({ globalKeys: true }),
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          graphiql: false,
        }),
      ],
      providers: [TransfersResolver],
    })
    class TransfersModule {}
    app = await bootstrapTestApp(TransfersModule, 'express');
  });

  afterAll(async () => {
    await app?.close();
    await admin?.end();
    await database?.drop();
  });

  it('three calls with one key: one transfer, one receipt, one answer', async () => {
    const answers: unknown[] = [];
    for (let i = 0; i < 3; i++) {
      const response = await request(app.getHttpServer())
        .post('/graphql')
        .set('Idempotency-Key', 'transfer-1')
        .send({ query: 'mutation { createTransfer(amount: 9) { id receipt } }' });
      answers.push((response.body as { data: unknown }).data);
    }
    const count = async (table: string) =>
      Number((await admin.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);
    // Observed: receipts 3, answers receipt 1, 2, 3.
    expect({
      transfers: await count('transfers'),
      receipts: await count('receipts'),
      answers,
    }).toEqual({
      transfers: 1,
      receipts: 1,
      answers: [answers[0], answers[0], answers[0]],
    });
  });
});
