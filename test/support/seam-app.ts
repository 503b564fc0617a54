import {
  type ArgumentsHost,
  Body,
  Catch,
  ConflictException,
  Controller,
  type DynamicModule,
  HttpException,
  type INestApplication,
  Injectable,
  Module,
  Param,
  Post,
  type Type,
} from '@nestjs/common';
import { APP_FILTER, BaseExceptionFilter, HttpAdapterHost } from '@nestjs/core';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { Column, DataSource, Entity, type EntityManager, PrimaryGeneratedColumn } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  type IdempotencyModuleBaseOptions,
  Idempotent,
  IdempotentTransaction,
  RetryLaterError,
} from '../../lib/index.js';
import { type AdapterName, bootstrapTestApp } from './bootstrap.js';

/**
 * The app of the seam tests: one route per way a handler's code meets the request's
 * transaction (nested transactions, query runners driven by hand, raw transaction control,
 * isolation levels, a second DataSource, work left running after the answer). Each cell
 * writes `orders` rows tagged with the request's tag, so that a test counts its effects.
 */
@Entity({ name: 'orders', synchronize: false })
export class Order {
  @PrimaryGeneratedColumn()
  id!: number;

  @Column({ type: 'text' })
  tag!: string;

  @Column({ type: 'text' })
  name!: string;
}

export const SEAM_DDL = `
  CREATE TABLE IF NOT EXISTS orders (id serial PRIMARY KEY, tag text NOT NULL, name text NOT NULL,
    UNIQUE (tag, name));
  CREATE TABLE IF NOT EXISTS audit (id serial PRIMARY KEY, tag text NOT NULL, what text NOT NULL);
  CREATE TABLE IF NOT EXISTS bookings (id serial PRIMARY KEY, slot text NOT NULL, who text NOT NULL);
  CREATE OR REPLACE FUNCTION seam_forget(t text) RETURNS int LANGUAGE plpgsql AS $$
    BEGIN DELETE FROM orders WHERE tag = t; RETURN 1; END $$;`;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Holds each caller until `count` callers of the same name arrived (or `timeoutMs` passed),
 * so that two requests both read before either writes: a real write-skew race, every time.
 * Once open, a name stays open (a retry passes at once).
 */
const barriers = new Map<string, { arrived: number; open: Promise<void>; release: () => void }>();
export function barrier(name: string, count = 2, timeoutMs = 5000): Promise<void> {
  let entry = barriers.get(name);
  if (!entry) {
    let release!: () => void;
    const open = new Promise<void>((resolve) => (release = resolve));
    entry = { arrived: 0, open, release };
    barriers.set(name, entry);
    setTimeout(release, timeoutMs).unref();
  }
  entry.arrived++;
  if (entry.arrived >= count) entry.release();
  return entry.open;
}

/** Tags whose first attempt failed (their retry succeeds). */
const failedOnce = new Set<string>();

/** What became of each write a handler left running after its answer, by tag. */
export const laterOutcomes = new Map<string, string>();

const LEVELS = {
  'read-uncommitted': 'READ UNCOMMITTED',
  'read-committed': 'READ COMMITTED',
  'repeatable-read': 'REPEATABLE READ',
  serializable: 'SERIALIZABLE',
} as const;

/** Raw statements that would end (or start) the request's transaction. */
export const RAW_CONTROL = {
  commit: 'COMMIT',
  rollback: 'ROLLBACK',
  begin: 'BEGIN',
  'start-transaction': 'START TRANSACTION',
  end: 'END',
  abort: 'ABORT',
  'insert-then-commit': "INSERT INTO audit (tag, what) VALUES ('-', 'raw'); COMMIT",
} as const;

export interface SeamBody {
  tag: string;
  /** For the `book` cells: the slot both requests race for. */
  slot?: string;
  /** For the `later` cells: how long after the answer the left-over write starts. */
  delayMs?: number;
}

/** A DataSource of the app's own besides the library's: it is not joined. */
@Injectable()
export class SecondDataSource {
  dataSource!: DataSource;
}

@Injectable()
export class SeamCells {
  constructor(
    @InjectDataSource() private readonly dataSource: DataSource,
    private readonly explicit: IdempotentTransaction,
    private readonly second: SecondDataSource,
  ) {}

  order(manager: EntityManager | DataSource, tag: string, name: string) {
    return manager.query('INSERT INTO orders (tag, name) VALUES ($1, $2)', [tag, name]);
  }

  private async level(manager: EntityManager): Promise<string> {
    const [row] = (await manager.query(
      `SELECT current_setting('transaction_isolation') AS level`,
    )) as { level: string }[];
    return row.level;
  }

  /** Runs the cell named `cell`; what it returns is the handler's answer. */
  async run(cell: string, body: SeamBody): Promise<object> {
    const { tag } = body;
    const ds = this.dataSource;
    if (cell.startsWith('tx-')) {
      const level = LEVELS[cell.slice(3) as keyof typeof LEVELS];
      return ds.transaction(level, async (manager) => {
        await this.order(manager, tag, 'A');
        return { level: await this.level(manager) };
      });
    }
    if (cell.startsWith('raw-')) {
      // A best-effort handler: it swallows every failure, and answers as if all went well.
      const statement = RAW_CONTROL[cell.slice(4) as keyof typeof RAW_CONTROL];
      await this.order(ds, tag, 'A');
      let refused = '';
      try {
        await ds.query(statement);
      } catch (error) {
        refused = (error as Error).message;
      }
      try {
        await ds.query(`INSERT INTO audit (tag, what) VALUES ($1, 'after')`, [tag]);
      } catch {
        // best effort
      }
      return { refused };
    }
    switch (cell) {
      case 'plain':
        await this.order(ds, tag, 'A');
        return { order: 'A' };
      case 'nested':
        await ds.transaction(async (manager) => {
          await this.order(manager, tag, 'A');
          await manager.transaction((inner) => this.order(inner, tag, 'B'));
        });
        return { orders: 2 };
      case 'twice-nested':
        await ds.transaction(async (manager) => {
          await this.order(manager, tag, 'A');
          await manager.transaction(async (inner) => {
            await this.order(inner, tag, 'B');
            await inner.transaction((innermost) => this.order(innermost, tag, 'C'));
          });
        });
        return { orders: 3 };
      case 'nested-levels':
        // SERIALIZABLE first (the request's transaction begins at it), then the same inside.
        await ds.transaction('SERIALIZABLE', async (manager) => {
          await this.order(manager, tag, 'A');
          await manager.transaction('SERIALIZABLE', async (inner) => {
            await this.order(inner, tag, 'B');
            await inner.transaction('READ COMMITTED', (innermost) =>
              this.order(innermost, tag, 'C'),
            );
          });
        });
        return { orders: 3 };
      case 'nested-stronger':
        // REPEATABLE READ first, then SERIALIZABLE inside it: a savepoint, whose level TypeORM
        // ignores (it cannot be raised inside a transaction).
        await ds.transaction('REPEATABLE READ', async (manager) => {
          await this.order(manager, tag, 'A');
          await manager.transaction('SERIALIZABLE', (inner) => this.order(inner, tag, 'B'));
        });
        return { orders: 2 };
      case 'inner-fails':
        // A statement fails inside a nested transaction: it rolls back to its savepoint, and
        // the request goes on.
        await this.order(ds, tag, 'A');
        try {
          await ds.transaction(async (manager) => {
            await this.order(manager, tag, 'B');
            await this.order(manager, tag, 'A'); // 23505
          });
        } catch {
          // "already there"
        }
        await this.order(ds, tag, 'C');
        return { orders: 2 };
      case 'savepoint-fails': {
        // A failed statement swallowed, then a best-effort nested transaction, swallowed too:
        // its SAVEPOINT fails (25P02) in the aborted transaction.
        await this.order(ds, tag, 'A');
        try {
          await this.order(ds, tag, 'A'); // 23505, swallowed
        } catch {
          // "already there"
        }
        try {
          await ds.transaction((manager) => this.order(manager, tag, 'B'));
        } catch {
          // best effort
        }
        try {
          await ds.query(`INSERT INTO audit (tag, what) VALUES ($1, 'after')`, [tag]);
        } catch {
          // best effort
        }
        return { order: 'B' };
      }
      case 'runner-commit':
      case 'runner-rollback': {
        await this.order(ds, tag, 'A');
        const runner = ds.createQueryRunner();
        await runner.connect();
        await runner.startTransaction();
        try {
          await this.order(runner.manager, tag, 'B');
          if (cell === 'runner-commit') await runner.commitTransaction();
          else await runner.rollbackTransaction();
        } finally {
          await runner.release();
        }
        return { orders: cell === 'runner-commit' ? 2 : 1 };
      }
      case 'runner-client-released': {
        // The pg client a runner hands out, released by hand: the connection is the request's.
        await this.order(ds, tag, 'A');
        const runner = ds.createQueryRunner();
        const client = (await runner.connect()) as { release(): void };
        client.release();
        await this.order(runner.manager, tag, 'B');
        await runner.release();
        return { orders: 2 };
      }
      case 'thrown-raw-commit':
        // Not caught: the refusal is the handler's error, its answer stored.
        await this.order(ds, tag, 'A');
        await ds.query('COMMIT');
        return { orders: 1 };
      case 'runner-rollback-unstarted-thrown': {
        const runner = ds.createQueryRunner();
        await this.order(runner.manager, tag, 'A');
        await runner.rollbackTransaction();
        return { orders: 1 };
      }
      case 'runner-commit-unstarted': {
        // commitTransaction() with no startTransaction(): it would COMMIT the request's.
        const runner = ds.createQueryRunner();
        await runner.connect();
        await this.order(runner.manager, tag, 'A');
        let refused = '';
        try {
          await runner.commitTransaction();
        } catch (error) {
          refused = (error as Error).message;
        } finally {
          await runner.release();
        }
        return { refused };
      }
      case 'stronger-after-write':
        await this.order(ds, tag, 'A');
        await ds.transaction('SERIALIZABLE', (manager) => this.order(manager, tag, 'B'));
        return { orders: 2 };
      case 'second-datasource':
        await this.order(ds, tag, 'A');
        await this.second.dataSource.query(`INSERT INTO audit (tag, what) VALUES ($1, 'second')`, [
          tag,
        ]);
        return { orders: 1 };
      case 'second-datasource-rolled-back':
        await this.order(ds, tag, 'A');
        await this.second.dataSource.query(`INSERT INTO audit (tag, what) VALUES ($1, 'second')`, [
          tag,
        ]);
        if (!failedOnce.has(tag)) {
          failedOnce.add(tag);
          throw new RetryLaterError('the downstream system is down');
        }
        return { orders: 1 };
      case 'book':
        return ds.transaction('SERIALIZABLE', (manager) => this.book(manager, body));
      case 'forget-multi':
        // Reads, then deletes, in one text: the delete must roll back with the request.
        await ds.query(`SELECT 1; DELETE FROM orders WHERE tag = '${tag}-seed'`);
        throw new RetryLaterError('the downstream system is down');
      case 'forget-function':
        await ds.query('SELECT seam_forget($1)', [`${tag}-seed`]);
        throw new RetryLaterError('the downstream system is down');
      case 'later':
      case 'later-manager':
      case 'later-rolled-back': {
        await this.order(ds, tag, 'A');
        // Held before the answer: a manager of the request's own runner.
        const manager = this.explicit.manager;
        const name = `${tag}-later`;
        const leave = () => {
          const write =
            cell === 'later-manager'
              ? this.order(manager, name, 'L')
              : ds.query('INSERT INTO orders (tag, name) VALUES ($1, $2)', [name, 'L']);
          write.then(
            () => laterOutcomes.set(name, 'written'),
            (error: unknown) => laterOutcomes.set(name, errorName(error)),
          );
        };
        // A negative delay: started before the handler returns, and not awaited.
        if ((body.delayMs ?? 0) < 0) leave();
        else setTimeout(leave, body.delayMs ?? 0);
        if (cell === 'later-rolled-back')
          throw new RetryLaterError('the downstream system is down');
        return { order: 'A' };
      }
    }
    throw new Error(`no cell ${cell}`);
  }

  /** Books the slot unless it is taken: reads, waits for the other request to read, writes. */
  async book(manager: EntityManager, body: SeamBody): Promise<object> {
    const slot = body.slot!;
    const [{ n }] = (await manager.query(
      'SELECT count(*)::int AS n FROM bookings WHERE slot = $1',
      [slot],
    )) as { n: number }[];
    await barrier(slot);
    if (n > 0) throw new ConflictException('slot taken');
    await manager.query('INSERT INTO bookings (slot, who) VALUES ($1, $2)', [slot, body.tag]);
    return { slot, who: body.tag };
  }
}

/** The error's own name, or that of the driver error TypeORM wrapped. */
function errorName(error: unknown): string {
  const driver = (error as { driverError?: Error }).driverError;
  return driver?.name ?? (error as Error).name;
}

@Controller()
class SeamController {
  constructor(
    private readonly cells: SeamCells,
    @InjectDataSource() private readonly dataSource: DataSource,
  ) {}

  @Post('seam/:cell')
  @Idempotent()
  async run(@Param('cell') cell: string, @Body() body: SeamBody) {
    return { cell, ...(await this.cells.run(cell, body)) };
  }

  @Post('book-plain')
  @Idempotent()
  async bookPlain(@Body() body: SeamBody) {
    // No isolation asked for: both requests book the slot (the control of the race).
    return this.cells.book(this.dataSource.manager, body);
  }

  /** The route sets the level: the request's transaction begins at it, its reads in it. */
  @Post('serializable-route/book')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  bookOnRoute(@Body() body: SeamBody) {
    return this.cells.book(this.dataSource.manager, body);
  }

  @Post('serializable-route/:cell')
  @Idempotent({ isolationLevel: 'SERIALIZABLE' })
  async onRoute(@Param('cell') cell: string, @Body() body: SeamBody) {
    return { cell, ...(await this.cells.run(cell, body)) };
  }
}

/**
 * Renders the library's refusals (an app's own filter would do the same for its errors) with
 * their message, so that a test asserts it; every other error goes to Nest's own filter.
 */
@Catch()
class RefusalFilter extends BaseExceptionFilter {
  constructor(private readonly host: HttpAdapterHost) {
    super();
  }

  override catch(error: unknown, host: ArgumentsHost): void {
    // A refusal met by a statement reaches the handler wrapped in TypeORM's QueryFailedError.
    const refusal = ((error as { driverError?: unknown } | undefined)?.driverError ?? error) as
      Error | undefined;
    const name = refusal?.name ?? '';
    if (error instanceof HttpException || !name.endsWith('RefusedError')) {
      return super.catch(error, host);
    }
    const response = host.switchToHttp().getResponse<object>();
    this.host.httpAdapter.reply(response, { error: name, message: refusal!.message }, 500);
  }
}

export async function createSeamApp(options: {
  databaseUrl: string;
  adapter: AdapterName;
  idempotency?: IdempotencyModuleBaseOptions;
  extra?: { imports?: DynamicModule[]; controllers?: Type[]; providers?: Type[] };
}): Promise<INestApplication> {
  @Module({
    imports: [
      TypeOrmModule.forRoot({
        type: 'postgres',
        url: options.databaseUrl,
        entities: [Order],
        migrations: [...IDEMPOTENCY_MIGRATIONS],
        migrationsRun: true,
        connectTimeoutMS: 2000,
        extra: { max: 10 },
      }),
      IdempotencyModule.forRoot({ tenant: () => 1, ...options.idempotency }),
      ...(options.extra?.imports ?? []),
    ],
    controllers: [SeamController, ...(options.extra?.controllers ?? [])],
    providers: [
      SeamCells,
      SecondDataSource,
      { provide: APP_FILTER, useClass: RefusalFilter },
      ...(options.extra?.providers ?? []),
    ],
  })
  class SeamAppModule {}
  const app = await bootstrapTestApp(SeamAppModule, options.adapter);
  const second = new DataSource({ type: 'postgres', url: options.databaseUrl, extra: { max: 2 } });
  await second.initialize();
  app.get(SecondDataSource).dataSource = second;
  const close = app.close.bind(app);
  app.close = async () => {
    await close();
    await second.destroy();
  };
  return app;
}

export { sleep };
