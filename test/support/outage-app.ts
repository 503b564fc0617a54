import {
  Body,
  Controller,
  type DynamicModule,
  HttpCode,
  type INestApplication,
  Inject,
  Module,
  Param,
  Post,
} from '@nestjs/common';
import { ApolloDriver, type ApolloDriverConfig } from '@nestjs/apollo';
import { APP_FILTER } from '@nestjs/core';
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
import { TypeOrmModule } from '@nestjs/typeorm';
import { PrismaPg } from '@prisma/adapter-pg';
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect, sql as kyselySql } from 'kysely';
import { Pool } from 'pg';
import { DataSource, type EntityManager } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyErrorFilter,
  IdempotencyModule,
  Idempotent,
  PhaseRunner,
  ProcessedMessages,
} from '../../lib/index.js';
import { PrismaClient } from '../../examples/prisma-orders/generated/client.js';
import { type AdapterName, bootstrapTestApp } from './bootstrap.js';

/**
 * The app of the outage table's end-to-end cells: one route per data layer the library joins,
 * each writing a row, waiting at a gate the test holds (where it breaks the database), then
 * writing a second row; and the same work as a consumer's delivery (`ProcessedMessages`) and
 * as a phase of `PhaseRunner`. Rows are tagged with the request's tag, so a test counts them.
 */
export const OUTAGE_DDL = `
  CREATE TABLE IF NOT EXISTS outage_rows (id serial PRIMARY KEY, tag text NOT NULL, n int NOT NULL,
    UNIQUE (tag, n));`;

/** Gates the test holds: a handler arrives, the test breaks the database, then opens it. */
const gates = new Map<
  string,
  { arrived: () => void; reached: Promise<void>; open: Promise<void>; release: () => void }
>();

function gate(tag: string) {
  let entry = gates.get(tag);
  if (!entry) {
    let arrived!: () => void;
    let release!: () => void;
    const reached = new Promise<void>((resolve) => (arrived = resolve));
    const open = new Promise<void>((resolve) => (release = resolve));
    entry = { arrived, reached, open, release };
    gates.set(tag, entry);
  }
  return entry;
}

/** Resolves once a handler with `tag` waits at its gate. */
export const reachedGate = (tag: string) => gate(tag).reached;
/** Lets the handler with `tag` go on (and every later one with it at once). */
export const openGate = (tag: string) => gate(tag).release();

async function atGate(tag: string) {
  const entry = gate(tag);
  entry.arrived();
  await entry.open;
}

export type OutageLayer = 'typeorm' | 'pg' | 'prisma' | 'drizzle' | 'kysely';

const POOL = Symbol('POOL');

/** Each data layer's write of one row, on the app's pool (or TypeORM's DataSource). */
class Writers {
  readonly prisma?: PrismaClient;
  readonly drizzle?: ReturnType<typeof drizzle>;
  readonly kysely?: Kysely<Record<string, never>>;

  constructor(
    readonly pool: Pool | undefined,
    readonly dataSource: DataSource | undefined,
  ) {
    if (pool) {
      this.prisma = new PrismaClient({ adapter: new PrismaPg(pool) });
      this.drizzle = drizzle({ client: pool });
      this.kysely = new Kysely({ dialect: new PostgresDialect({ pool }) });
    }
  }

  write(layer: OutageLayer, tag: string, n: number, manager?: EntityManager): Promise<unknown> {
    switch (layer) {
      case 'typeorm':
        return (manager ?? this.dataSource!).query(
          'INSERT INTO outage_rows (tag, n) VALUES ($1, $2)',
          [tag, n],
        );
      case 'pg':
        return this.pool!.query('INSERT INTO outage_rows (tag, n) VALUES ($1, $2)', [tag, n]);
      case 'prisma':
        return this.prisma!.$executeRaw`INSERT INTO outage_rows (tag, n) VALUES (${tag}, ${n})`;
      case 'drizzle':
        return this.drizzle!.execute(
          drizzleSql`INSERT INTO outage_rows (tag, n) VALUES (${tag}, ${n})`,
        );
      case 'kysely':
        return kyselySql`INSERT INTO outage_rows (tag, n) VALUES (${tag}, ${n})`.execute(
          this.kysely!,
        );
    }
  }

  /** Two rows, the gate between them. */
  async work(layer: OutageLayer, tag: string, manager?: EntityManager): Promise<{ rows: number }> {
    await this.write(layer, tag, 1, manager);
    await atGate(tag);
    await this.write(layer, tag, 2, manager);
    return { rows: 2 };
  }
}

@Controller()
class OutageController {
  constructor(
    @Inject(Writers) private readonly writers: Writers,
    private readonly messages: ProcessedMessages,
    private readonly phases: PhaseRunner,
  ) {}

  @Post('requests/:layer')
  @Idempotent()
  request(@Param('layer') layer: OutageLayer, @Body() body: { tag: string }) {
    return this.writers.work(layer, body.tag);
  }

  @Post('phases/:layer')
  @Idempotent()
  async phase(@Param('layer') layer: OutageLayer, @Body() body: { tag: string }) {
    await this.phases.run('written', () => this.writers.work(layer, body.tag));
    return this.phases.finish(async () => ({ rows: 2 }));
  }

  @Post('messages/:layer')
  @HttpCode(200)
  async message(@Param('layer') layer: OutageLayer, @Body() body: { tag: string }) {
    // On TypeORM the delivery's writes go through its manager (the transaction's runner).
    const outcome = await this.messages.processOnce('outage', body.tag, (manager) =>
      this.writers.work(layer, body.tag, manager),
    );
    return { duplicate: outcome.duplicate };
  }
}

@ObjectType()
class Written {
  @Field(() => Int)
  rows!: number;
}

/** The same work as a GraphQL mutation (Apollo on Express). */
@Resolver(() => Written)
class OutageResolver {
  constructor(@Inject(Writers) private readonly writers: Writers) {}

  @Query(() => Int)
  ready() {
    return 1;
  }

  @Mutation(() => Written)
  @Idempotent()
  write(@Args('layer') layer: string, @Args('tag') tag: string) {
    return this.writers.work(layer as OutageLayer, tag);
  }
}

const GRAPHQL = GraphQLModule.forRoot<ApolloDriverConfig>({
  driver: ApolloDriver,
  autoSchemaFile: true,
  graphiql: false,
});

@Module({})
class OutageModule {
  static register(databaseUrl: string, typeorm: boolean): DynamicModule {
    if (typeorm) {
      return {
        module: OutageModule,
        imports: [
          TypeOrmModule.forRoot({
            type: 'postgres',
            url: databaseUrl,
            migrations: IDEMPOTENCY_MIGRATIONS,
            migrationsRun: true,
            connectTimeoutMS: 1000,
          }),
          IdempotencyModule.forRoot({
            tenant: () => '1',
            databaseTimeoutMs: 2000,
          }),
          GRAPHQL,
        ],
        controllers: [OutageController],
        providers: [
          OutageResolver,
          {
            provide: Writers,
            inject: [DataSource],
            useFactory: (dataSource: DataSource) => new Writers(undefined, dataSource),
          },
          { provide: APP_FILTER, useClass: IdempotencyErrorFilter },
        ],
      };
    }
    const pool = new Pool({ connectionString: databaseUrl, connectionTimeoutMillis: 1000, max: 6 });
    pool.on('error', () => undefined);
    return {
      module: OutageModule,
      imports: [
        IdempotencyModule.forRootAsync({
          useFactory: () => ({ pool, tenant: () => '1', databaseTimeoutMs: 2000 }),
        }),
        GRAPHQL,
      ],
      controllers: [OutageController],
      providers: [
        OutageResolver,
        { provide: POOL, useValue: pool },
        { provide: Writers, useFactory: () => new Writers(pool, undefined) },
        { provide: APP_FILTER, useClass: IdempotencyErrorFilter },
      ],
    };
  }
}

export function createOutageApp(
  databaseUrl: string,
  typeorm: boolean,
  adapter: AdapterName = 'express',
): Promise<INestApplication> {
  @Module({ imports: [OutageModule.register(databaseUrl, typeorm)] })
  class OutageRoot {}
  return bootstrapTestApp(OutageRoot, adapter);
}
