import {
  BadRequestException,
  Body,
  Controller,
  Header,
  HttpCode,
  Injectable,
  type INestApplication,
  Module,
  Param,
  type PipeTransform,
  Post,
  Res,
  type DynamicModule,
  UseInterceptors,
} from '@nestjs/common';
import { RequestTimeoutInterceptor } from '../../sample-app/request-timeout.interceptor.js';
import { type AdapterName, bootstrapTestApp } from './bootstrap.js';
import { appDatabaseUrl, poolerOption } from './pgbouncer.js';
import { InjectDataSource, TypeOrmModule } from '@nestjs/typeorm';
import { type DataSource, type MigrationInterface } from 'typeorm';
import {
  IDEMPOTENCY_MIGRATIONS,
  IdempotencyModule,
  type IdempotencyModuleBaseOptions,
  Idempotent,
} from '../../lib/index.js';

export { ADAPTERS, type AdapterName } from './bootstrap.js';

interface OrderBody {
  amount: number;
  note?: string;
  delayMs?: number;
}

/** Like a timeout interceptor an app applies to every route (the sample app's), outside ours. */
const outerTimeout = () => new RequestTimeoutInterceptor(200);

@Injectable()
class SlowPipe implements PipeTransform {
  async transform(value: unknown) {
    await sleep(500);
    return value;
  }
}

/** Stands in for ValidationPipe: runs before the handler, after the interceptor. */
@Injectable()
class OrderValidationPipe implements PipeTransform<unknown, OrderBody> {
  transform(value: unknown): OrderBody {
    const body = value as Partial<OrderBody> | undefined;
    if (!body || !Number.isInteger(body.amount) || (body.amount as number) <= 0) {
      throw new BadRequestException('amount must be a positive integer');
    }
    return body as OrderBody;
  }
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * Each handler records a real side effect in `side_effects`, so that tests count executions
 * in the database rather than trusting the handler's own word.
 */
@Controller()
class OrdersController {
  constructor(@InjectDataSource() private readonly dataSource: DataSource) {}

  private async record(route: string, amount: number | null): Promise<number> {
    const rows = (await this.dataSource.query(
      'INSERT INTO side_effects (route, amount) VALUES ($1, $2) RETURNING id',
      [route, amount],
    )) as { id: number }[];
    return rows[0].id;
  }

  @Post('orders')
  @Idempotent()
  async create(@Body(OrderValidationPipe) body: OrderBody) {
    if (body.delayMs) await sleep(body.delayMs);
    const id = await this.record('orders', body.amount);
    return { id, amount: body.amount, note: body.note ?? null };
  }

  @Idempotent()
  @Post('accounts/:account/deposits')
  @HttpCode(202)
  @Header('Location', '/deposits/latest')
  async deposit(@Param('account') account: string, @Body() body: { amount: number }) {
    const id = await this.record(`deposit:${account}`, body.amount);
    return { id, account };
  }

  @Post('crash')
  @Idempotent()
  async crash(@Body() body: { amount: number }) {
    await this.record('crash', body.amount);
    throw new Error('boom: the handler failed after its side effect');
  }

  @Post('text')
  @Idempotent()
  async text() {
    const id = await this.record('text', null);
    return `plain text ${id}`;
  }

  @Post('optional')
  @Idempotent({ required: false })
  async optional() {
    const id = await this.record('optional', null);
    return { id };
  }

  /** No database work of its own: what it costs is the library's alone. */
  @Post('noop')
  @Idempotent()
  noop() {
    return { ok: true };
  }

  /** An outer interceptor gives up after 200 ms, while the handler goes on. */
  @Post('timeout')
  @Idempotent()
  @UseInterceptors(outerTimeout())
  async underTimeout(@Body() body: { delayMs: number }) {
    await sleep(body.delayMs);
    const id = await this.record('timeout', null);
    return { id };
  }

  /** Writes its own response, as Nest leaves it to handlers that take @Res(). */
  @Post('own-response')
  @Idempotent()
  async ownResponse(@Res() res: { status(code: number): { send(body: unknown): void } }) {
    const id = await this.record('own-response', null);
    res.status(201).send({ id, wrote: 'itself' });
  }

  /** A pipe slower than the outer timeout: the handler has not started when it gives up. */
  @Post('timeout-in-pipe')
  @Idempotent()
  @UseInterceptors(outerTimeout())
  async slowPipe(@Body(SlowPipe) body: { delayMs: number }) {
    const id = await this.record('timeout-in-pipe', null);
    return { id, body };
  }

  @Post('no-content')
  @Idempotent()
  @HttpCode(204)
  async noContent() {
    await this.record('no-content', null);
  }

  /** Answers `size` bytes; the route stores at most 1 KiB. */
  @Post('sized')
  @Idempotent({ maxResponseBytes: 1024 })
  async sized(@Body() body: { size: number }) {
    await this.record('sized', body.size);
    return { pad: 'x'.repeat(Math.max(0, body.size - 10)) };
  }

  /** Sets a header of its own, which `replayHeaders` may keep. */
  @Post('costed')
  @Idempotent({ replayHeaders: ['X-Request-Cost'] })
  @Header('X-Request-Cost', '7')
  async costed() {
    const id = await this.record('costed', null);
    return { id };
  }

  @Post('plain')
  async plain() {
    const id = await this.record('plain', null);
    return { id };
  }
}

@Module({ controllers: [OrdersController] })
class OrdersModule {}

/** The app the end-to-end tests drive: the module on a real DataSource, real migrations. */
export async function createTestApp(options: {
  databaseUrl: string;
  adapter: AdapterName;
  idempotency?: IdempotencyModuleBaseOptions;
  connectTimeoutMS?: number;
  /** Run after the library's: the opt-in partitioned layout. */
  migrations?: (new () => MigrationInterface)[];
}): Promise<INestApplication> {
  const typeorm: DynamicModule = TypeOrmModule.forRoot({
    type: 'postgres',
    url: await appDatabaseUrl(options.databaseUrl),
    migrations: [...IDEMPOTENCY_MIGRATIONS, ...(options.migrations ?? [])],
    migrationsRun: true,
    connectTimeoutMS: options.connectTimeoutMS ?? 2000,
    logging: false,
  });
  @Module({
    imports: [
      typeorm,
      IdempotencyModule.forRoot({
        tenant: (req) => (req.headers['x-tenant-id'] as string | undefined) ?? '1',
        ...poolerOption(),
        ...options.idempotency,
      }),
      OrdersModule,
    ],
  })
  class TestAppModule {}

  return bootstrapTestApp(TestAppModule, options.adapter);
}

/** The side-effect table the test controller writes to; not the library's (no migration). */
export const SIDE_EFFECTS_DDL = `CREATE TABLE IF NOT EXISTS side_effects (
  id serial PRIMARY KEY, route text NOT NULL, amount bigint, created_at timestamptz DEFAULT now())`;
