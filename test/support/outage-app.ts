import {
  type ArgumentsHost,
  Body,
  Catch,
  Controller,
  type DynamicModule,
  HttpCode,
  type INestApplication,
  Inject,
  Module,
  Param,
  Post,
  type RpcExceptionFilter,
  type Type,
  UseFilters,
} from '@nestjs/common';
import { APP_FILTER } from '@nestjs/core';
import { EventPattern, Payload } from '@nestjs/microservices';
import { TypeOrmModule } from '@nestjs/typeorm';
import { PrismaPg } from '@prisma/adapter-pg';
import { sql as drizzleSql } from 'drizzle-orm';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect, sql as kyselySql } from 'kysely';
import { Pool } from 'pg';
import { type Observable, throwError } from 'rxjs';
import { DataSource, type EntityManager } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyErrorFilter,
  IdempotencyModule,
  Idempotent,
  IdempotentMessage,
  PhaseRunner,
  ProcessedMessages,
} from '../../lib/index.js';
import { PrismaClient } from '../../examples/prisma-orders/generated/client.js';
import { type AdapterName, bootstrapTestApp } from './bootstrap.js';

/**
 * The app of the outage table's end-to-end cells: one route per data layer the library joins,
 * each writing a row, waiting at a gate the test holds (where it breaks the database), then
 * writing a second row; and the same work as a consumer's delivery (`ProcessedMessages`, and an
 * `@IdempotentMessage()` handler for the brokers a test connects), as a phase of `PhaseRunner`
 * and as a GraphQL mutation. Rows are tagged with the request's tag, so a test counts them.
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

/** The `consumer` of the app's `@IdempotentMessage()` handler. */
export const OUTAGE_CONSUMER = 'outage-consumer';

/** Each data layer's write of one row, on the app's pool (or TypeORM's DataSource). */
export class Writers {
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

  /** Two rows, the gate (`tag`'s, unless another is named) between them. */
  async work(
    layer: OutageLayer,
    tag: string,
    manager?: EntityManager,
    gateName = tag,
  ): Promise<{ rows: number }> {
    await this.write(layer, tag, 1, manager);
    await atGate(gateName);
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

/** The gate of a message's deliveries after its first: the test holds the redelivery too. */
export const redeliveryGate = (tag: string) => `${tag} again`;

/** A consumer's message: the data layer to write through and the tag of its rows. */
export interface OutageMessage {
  layer: OutageLayer;
  tag: string;
}

/** An error a consumer's delivery raised: its class, and its code (the library's, a driver's). */
export interface RaisedError {
  name: string;
  code?: unknown;
}

/** The errors the consumer's deliveries raised, by tag, in order. */
export const consumerErrors = new Map<string, RaisedError[]>();

/**
 * Writes down what a delivery raised, as an app's own RPC exception filter meets it (the one
 * that tells a `@MessagePattern` requester to retry later, or not), then lets it go on.
 */
@Catch()
class RecordConsumerErrors implements RpcExceptionFilter {
  catch(error: unknown, host: ArgumentsHost): Observable<never> {
    const { tag } = host.switchToRpc().getData<OutageMessage>();
    const { name, code } = error as { name?: string; code?: unknown };
    consumerErrors.set(tag, [...(consumerErrors.get(tag) ?? []), { name: String(name), code }]);
    return throwError(() => error);
  }
}

/**
 * The same work as a consumer's delivery under `@IdempotentMessage()`, for the brokers a test
 * connects (`app.connectMicroservice()`): acknowledged by the library on RabbitMQ (noAck:
 * false), given up after two failed deliveries, so that an outage counted against the message
 * shows at once. Its first delivery waits at `tag`'s gate, the later ones at `redeliveryGate`:
 * a redelivery at its gate has recorded the id, so the first one's record did not commit.
 */
@Controller()
@UseFilters(RecordConsumerErrors)
class OutageConsumer {
  private readonly deliveries = new Map<string, number>();

  constructor(@Inject(Writers) private readonly writers: Writers) {}

  @EventPattern('outage.write')
  @IdempotentMessage({ consumer: OUTAGE_CONSUMER, ack: true, maxAttempts: 2 })
  write(@Payload() message: OutageMessage) {
    const delivery = (this.deliveries.get(message.tag) ?? 0) + 1;
    this.deliveries.set(message.tag, delivery);
    const gateName = delivery === 1 ? message.tag : redeliveryGate(message.tag);
    return this.writers.work(message.layer, message.tag, undefined, gateName);
  }
}

/** What GraphQL adds to the app: Apollo's module, and the resolver (test/support/outage-graphql.ts). */
export interface OutageGraphql {
  module: DynamicModule;
  resolver: Type<unknown>;
}

@Module({})
class OutageModule {
  static register(
    databaseUrl: string,
    typeorm: boolean,
    graphql: OutageGraphql | undefined,
  ): DynamicModule {
    const graphqlImports = graphql ? [graphql.module] : [];
    const resolvers = graphql ? [graphql.resolver] : [];
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
          ...graphqlImports,
        ],
        controllers: [OutageController, OutageConsumer],
        providers: [
          ...resolvers,
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
        ...graphqlImports,
      ],
      controllers: [OutageController, OutageConsumer],
      providers: [
        ...resolvers,
        { provide: POOL, useValue: pool },
        { provide: Writers, useFactory: () => new Writers(pool, undefined) },
        { provide: APP_FILTER, useClass: IdempotencyErrorFilter },
      ],
    };
  }
}

/**
 * The app, on TypeORM or on a pg.Pool; `graphql: false` leaves Apollo out (and unloaded: it is
 * the slowest of the app's imports), for a test that sends no GraphQL.
 */
export async function createOutageApp(
  databaseUrl: string,
  typeorm: boolean,
  { adapter = 'express', graphql = true }: { adapter?: AdapterName; graphql?: boolean } = {},
): Promise<INestApplication> {
  const withGraphql = graphql ? (await import('./outage-graphql.js')).OUTAGE_GRAPHQL : undefined;
  @Module({ imports: [OutageModule.register(databaseUrl, typeorm, withGraphql)] })
  class OutageRoot {}
  return bootstrapTestApp(OutageRoot, adapter);
}
