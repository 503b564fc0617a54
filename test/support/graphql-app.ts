import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import {
  BadRequestException,
  type INestApplication,
  Module,
  type Provider,
  type Type,
} from '@nestjs/common';
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
import { MercuriusDriver, type MercuriusDriverConfig } from '@nestjs/mercurius';
import { getDataSourceToken, InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { GraphQLError } from 'graphql';
import { type DataSource, type EntityManager } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  Idempotent,
  PhaseRunner,
  RetryLaterError,
} from '../../lib/index.js';
import { type AdapterName, bootstrapTestApp } from './bootstrap.js';

/** Nest's two GraphQL drivers, each on the HTTP adapter it is used with. */
export type GraphqlDriverName = 'apollo' | 'mercurius';
export const GRAPHQL_DRIVERS: GraphqlDriverName[] = ['apollo', 'mercurius'];
const ADAPTER_OF: Record<GraphqlDriverName, AdapterName> = {
  apollo: 'express',
  mercurius: 'fastify',
};

@ObjectType()
export class Transfer {
  @Field(() => Int)
  id!: number;

  @Field(() => Int)
  amount!: number;

  @Field()
  note!: string;
}

/**
 * How `failTransfer` fails after its write: each kind of error an app throws, and a statement
 * the database cancels (its `statement_timeout`), a passing failure.
 */
export type FailureKind = 'graphql' | 'http' | 'error' | 'retry' | 'timeout';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Mutations that write a row to `transfers` through the app's DataSource (TypeORM), as a
 * resolver does: the idempotent ones, and the same without `@Idempotent()` for the controls.
 * `runs` counts the runs of each, which a failed one leaves no row to count.
 */
@Resolver(() => Transfer)
export class TransfersResolver {
  private readonly runs = new Map<string, number>();

  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async insert(name: string, amount: number, note = ''): Promise<Transfer> {
    this.runs.set(name, (this.runs.get(name) ?? 0) + 1);
    const rows = (await this.dataSource.query(
      'INSERT INTO transfers (amount, note) VALUES ($1, $2) RETURNING id',
      [amount, note],
    )) as { id: number }[];
    return { id: rows[0].id, amount, note };
  }

  @Query(() => Int)
  transfers(@Args('amount', { type: () => Int }) amount: number): Promise<number> {
    return this.dataSource
      .query('SELECT count(*)::int AS n FROM transfers WHERE amount = $1', [amount])
      .then((rows: { n: number }[]) => rows[0].n);
  }

  /** How many times the mutation `name` ran, failed runs included. */
  @Query(() => Int)
  calls(@Args('name') name: string): number {
    return this.runs.get(name) ?? 0;
  }

  @Mutation(() => Transfer)
  @Idempotent()
  async createTransfer(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('note', { nullable: true }) note?: string,
    @Args('delayMs', { type: () => Int, nullable: true }) delayMs?: number,
  ): Promise<Transfer> {
    const transfer = await this.insert('createTransfer', amount, note);
    if (delayMs) await sleep(delayMs);
    return transfer;
  }

  @Mutation(() => Transfer)
  @Idempotent({ keyFrom: { arg: 'idempotencyKey' } })
  createTransferByArg(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('idempotencyKey', { nullable: true }) _key?: string,
  ): Promise<Transfer> {
    return this.insert('createTransferByArg', amount);
  }

  @Mutation(() => Transfer, { nullable: true })
  @Idempotent()
  async failTransfer(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('kind') kind: string,
  ): Promise<Transfer> {
    await this.insert('failTransfer', amount);
    if (kind === 'timeout') {
      await this.dataSource.query("SET LOCAL statement_timeout = '20ms'");
      await this.dataSource.query('SELECT pg_sleep(1)');
    }
    throw failure(kind as FailureKind);
  }

  /** Answers a note of `size` characters, over its `maxResponseBytes` when large. */
  @Mutation(() => Transfer)
  @Idempotent({ maxResponseBytes: 200 })
  noteTransfer(
    @Args('amount', { type: () => Int }) amount: number,
    @Args('size', { type: () => Int }) size: number,
  ): Promise<Transfer> {
    return this.insert('noteTransfer', amount, 'n'.repeat(size));
  }

  /** The control: the same write without the library. */
  @Mutation(() => Transfer)
  plainTransfer(@Args('amount', { type: () => Int }) amount: number): Promise<Transfer> {
    return this.insert('plainTransfer', amount);
  }

  /** The control of the rollback: the same failure without the library. */
  @Mutation(() => Transfer, { nullable: true })
  async plainFailTransfer(@Args('amount', { type: () => Int }) amount: number): Promise<Transfer> {
    await this.insert('plainFailTransfer', amount);
    throw failure('error');
  }
}

/**
 * A mutation in two atomic phases: the transfer recorded, then settled. Its first call fails
 * in the second phase (the bank is down), after the first committed with its recovery point.
 */
@Resolver()
export class SettlementsResolver {
  private readonly recorded = new Map<number, number>();
  private readonly failed = new Set<number>();

  constructor(private readonly phases: PhaseRunner) {}

  @Mutation(() => Transfer)
  @Idempotent()
  async settleTransfer(@Args('amount', { type: () => Int }) amount: number): Promise<Transfer> {
    const { id } = await this.phases.run('recorded', async (manager: EntityManager) => {
      this.recorded.set(amount, (this.recorded.get(amount) ?? 0) + 1);
      const rows = (await manager.query(
        "INSERT INTO transfers (amount, note) VALUES ($1, 'recorded') RETURNING id",
        [amount],
      )) as { id: number }[];
      return { id: rows[0].id };
    });
    return this.phases.finish(async (manager: EntityManager) => {
      if (!this.failed.has(amount)) {
        this.failed.add(amount);
        throw new RetryLaterError('The bank is down', 1);
      }
      await manager.query("UPDATE transfers SET note = 'settled' WHERE id = $1", [id]);
      return { id, amount, note: 'settled' };
    });
  }

  /** How many times the first phase ran for `amount`. */
  @Query(() => Int)
  recordedRuns(@Args('amount', { type: () => Int }) amount: number): number {
    return this.recorded.get(amount) ?? 0;
  }
}

/** `@Idempotent()` on the class: its mutations, not its queries. */
@Resolver()
@Idempotent()
export class AccountsResolver {
  private opened = 0;

  @Mutation(() => Int)
  openAccount(@Args('owner') _owner: string): number {
    return ++this.opened;
  }

  /** A query needs no key, and runs each time. */
  @Query(() => Int)
  openedAccounts(): number {
    return this.opened;
  }
}

function failure(kind: FailureKind): Error {
  switch (kind) {
    case 'graphql':
      return new GraphQLError('The card was declined', {
        extensions: { code: 'CARD_DECLINED', reason: 'insufficient_funds' },
      });
    case 'http':
      return new BadRequestException('The amount is over the limit');
    case 'retry':
    case 'timeout':
      return new RetryLaterError('The bank did not answer in time', 2);
    case 'error':
      return new Error('The ledger is closed');
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

/**
 * Starts an app of `resolvers` on `driver`'s adapter, with the library and its tables;
 * `providers` adds others (a global interceptor, a pipe).
 */
export async function startGraphqlApp(
  url: string,
  driver: GraphqlDriverName,
  resolvers: Type<unknown>[] = [TransfersResolver, AccountsResolver, SettlementsResolver],
  providers: Provider[] = [],
): Promise<INestApplication> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url,
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        logging: false,
      }),
      IdempotencyModule.forRoot({ globalKeys: true }),
      graphqlModule(driver),
    ],
    providers: [...resolvers, ...providers],
  })
  class GraphqlAppModule {}
  return bootstrapTestApp(GraphqlAppModule, ADAPTER_OF[driver]);
}

/** Creates the app's table (once per database). */
export async function createTransfersTable(app: INestApplication): Promise<void> {
  await app
    .get<DataSource>(getDataSourceToken())
    .query(
      'CREATE TABLE IF NOT EXISTS transfers (id serial PRIMARY KEY, amount int NOT NULL, note text NOT NULL)',
    );
}
