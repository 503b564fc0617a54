/**
 * The seam app with `nestjs-cls` and `@nestjs-cls/transactional`, as a process of its own (as
 * cls-worker.ts explains, jest's module runtime cannot load them): one route per
 * `Propagation`, alone and inside an outer `@Transactional()`, and `@Transactional()` with an
 * isolation level. `ADAPTER` picks Express or Fastify.
 */
import { Body, Controller, Injectable, Param, Post } from '@nestjs/common';
import { Propagation, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { Idempotent } from '../../lib/index.js';
import { clsTransactionalModule } from './cls-transactional.js';
import { type AdapterName } from './bootstrap.js';
import { createSeamApp, SeamCells, type SeamBody } from './seam-app.js';

@Injectable()
class PropagationCells {
  constructor(
    private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>,
    private readonly cells: SeamCells,
  ) {}

  private insert(tag: string, name: string) {
    return this.txHost.tx.query('INSERT INTO orders (tag, name) VALUES ($1, $2)', [tag, name]);
  }

  private async level(): Promise<string> {
    const [row] = (await this.txHost.tx.query(
      `SELECT current_setting('transaction_isolation') AS level`,
    )) as { level: string }[];
    return row.level;
  }

  @Transactional(Propagation.Required)
  required(tag: string) {
    return this.insert(tag, 'P');
  }

  @Transactional(Propagation.RequiresNew)
  requiresNew(tag: string) {
    return this.insert(tag, 'P');
  }

  @Transactional(Propagation.Nested)
  nested(tag: string) {
    return this.insert(tag, 'P');
  }

  @Transactional(Propagation.Supports)
  supports(tag: string) {
    return this.insert(tag, 'P');
  }

  @Transactional(Propagation.Mandatory)
  mandatory(tag: string) {
    return this.insert(tag, 'P');
  }

  @Transactional(Propagation.NotSupported)
  notSupported(tag: string) {
    return this.insert(tag, 'P');
  }

  @Transactional(Propagation.Never)
  never(tag: string) {
    return this.insert(tag, 'P');
  }

  /** An outer `@Transactional()` that writes, then calls the cell inside it. */
  @Transactional()
  async outer(tag: string, inner: (tag: string) => Promise<unknown>) {
    await this.insert(tag, 'O');
    await inner(tag);
  }

  @Transactional<TransactionalAdapterTypeOrm>({ isolationLevel: 'SERIALIZABLE' })
  async serializable(tag: string) {
    await this.insert(tag, 'P');
    return this.level();
  }

  @Transactional<TransactionalAdapterTypeOrm>(Propagation.RequiresNew, {
    isolationLevel: 'SERIALIZABLE',
  })
  serializableNew(tag: string) {
    return this.insert(tag, 'S');
  }

  @Transactional<TransactionalAdapterTypeOrm>({ isolationLevel: 'SERIALIZABLE' })
  book(body: SeamBody) {
    return this.cells.book(this.txHost.tx, body);
  }
}

const PROPAGATIONS = {
  required: 'required',
  'requires-new': 'requiresNew',
  nested: 'nested',
  supports: 'supports',
  mandatory: 'mandatory',
  'not-supported': 'notSupported',
  never: 'never',
} as const;

@Controller()
class PropagationController {
  constructor(private readonly cells: PropagationCells) {}

  /** `/cls/<propagation>` alone, `/cls/<propagation>/in-outer` inside an outer one. */
  @Post('cls/:propagation/:where')
  @Idempotent()
  async run(
    @Param('propagation') propagation: keyof typeof PROPAGATIONS,
    @Param('where') where: 'alone' | 'in-outer',
    @Body() body: SeamBody,
  ) {
    const method = PROPAGATIONS[propagation];
    const cell = (tag: string) => this.cells[method](tag);
    if (where === 'in-outer') await this.cells.outer(body.tag, cell);
    else await cell(body.tag);
    return { propagation, where };
  }

  @Post('cls-isolation/first')
  @Idempotent()
  async first(@Body() body: SeamBody) {
    return { level: await this.cells.serializable(body.tag) };
  }

  @Post('cls-isolation/after-write')
  @Idempotent()
  async afterWrite(@Body() body: SeamBody) {
    await this.cells.required(body.tag);
    await this.cells.serializableNew(body.tag);
    return { orders: 2 };
  }

  @Post('cls-isolation/book')
  @Idempotent()
  book(@Body() body: SeamBody) {
    return this.cells.book(body);
  }
}

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is required');
const app = await createSeamApp({
  databaseUrl: url,
  adapter: (process.env.ADAPTER ?? 'express') as AdapterName,
  extra: {
    imports: [clsTransactionalModule()],
    controllers: [PropagationController],
    providers: [PropagationCells],
  },
});
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
const address = app.getHttpServer().address() as { port: number };
console.log(`listening on ${address.port}`);
