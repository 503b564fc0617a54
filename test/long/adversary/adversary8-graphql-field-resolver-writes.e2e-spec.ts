import { jest } from '@jest/globals';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { type INestApplication, Logger } from '@nestjs/common';
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
import { InjectDataSource } from '@nestjs/typeorm';
import { Client } from 'pg';
import request from 'supertest';
import { DataSource } from 'typeorm';
import { Idempotent } from '../../../lib/index.js';
import { startTypeormApp, type TypeormApp } from '../../support/typeorm-app.js';

/**
 * Adversary, round 8: a `@ResolveField()` under an idempotent mutation that writes (the
 * transfer's receipt, issued when the client selects it: `createTransfer(amount: 9) { id
 * receipt }`). GraphQL resolves the fields under the mutation's value after the mutation's
 * transaction committed, outside it, and again on every replay (which gives GraphQL the stored
 * value): three calls with one key issued three receipts, with three different answers.
 *
 * Answered as a limit the library states rather than closes: it sees only the mutation's
 * resolver (GraphQL runs the field resolvers in its executor, after the value, in no scope the
 * library has), so it cannot run them in the transaction nor tell their writes from anyone's.
 * What it does: at the first answer of each idempotent mutation, the app's log names the
 * fields under it that have resolvers of their own (and not the fields read from the value),
 * with what happens to them and what to do (write in the mutation's resolver); graphql.md says
 * the same. This suite proves the warning, and that the mutation's own effect stays once.
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
  let fixture: TypeormApp;
  let admin: Client;
  let app: INestApplication;

  beforeAll(async () => {
    fixture = await startTypeormApp('adv8_graphql_field_writes', {
      providers: [TransfersResolver],
      imports: [
        GraphQLModule.forRoot<ApolloDriverConfig>({
          driver: ApolloDriver,
          autoSchemaFile: true,
          graphiql: false,
        }),
      ],
      setup: async (admin) => {
        await admin.query('CREATE TABLE transfers (id serial PRIMARY KEY, amount int NOT NULL)');
        await admin.query(
          'CREATE TABLE receipts (id serial PRIMARY KEY, transfer_id int NOT NULL)',
        );
      },
    });
    ({ admin, app } = fixture);
  });

  afterAll(() => fixture?.close());

  it('three calls with one key: one transfer; the first answer names the field resolved on every call', async () => {
    const warn = jest.spyOn(Logger.prototype, 'warn');
    try {
      const answers: unknown[] = [];
      for (let i = 0; i < 3; i++) {
        const response = await request(app.getHttpServer())
          .post('/graphql')
          .set('Idempotency-Key', 'transfer-1')
          .send({ query: 'mutation { createTransfer(amount: 9) { id receipt } }' });
        answers.push((response.body as { data: { createTransfer: { id: number } } }).data);
      }
      const count = async (table: string) =>
        Number((await admin.query(`SELECT count(*) AS n FROM ${table}`)).rows[0].n);
      expect(await count('transfers')).toBe(1);
      // The mutation's value is the same on every call.
      const ids = answers.map(
        (answer) => (answer as { createTransfer: { id: number } }).createTransfer.id,
      );
      expect(new Set(ids).size).toBe(1);
      // Said once, naming the field with a resolver of its own, not those read from the value.
      const said = warn.mock.calls
        .map(([message]) => String(message))
        .filter((message) => message.includes('resolvers of their own'));
      expect(said).toEqual([
        'the idempotent mutation TransfersResolver.createTransfer answers fields that have ' +
          "resolvers of their own (Transfer.receipt): GraphQL runs them after the mutation's " +
          'transaction committed, outside it, at the first call and again at every replay. ' +
          'What they write is not the mutation’s (it commits on its own, once per call), and ' +
          'what they read is read anew. Write in the mutation’s resolver (its value is stored ' +
          'and replayed); keep field resolvers to reads',
      ]);
      // The limit it states: the field resolver ran on each call.
      expect(await count('receipts')).toBe(3);
    } finally {
      warn.mockRestore();
    }
  });
});
