/**
 * The atomic test app with `nestjs-cls` and `@nestjs-cls/transactional`, as a process of its
 * own: those packages are CommonJS that require Nest's ES modules, which Node 20 loads
 * (`require(esm)`) but jest's module runtime does not, so they are tested outside jest.
 */
import { Body, Controller, Injectable, Post } from '@nestjs/common';
import { Propagation, Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';
import { Idempotent, RetryLaterError } from '../../lib/index.js';
import { clsTransactionalModule } from './cls-transactional.js';
import { createAtomicApp, failedOnce, LedgerEntry } from './atomic-app.js';

@Injectable()
class ClsLedgerService {
  constructor(private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>) {}

  /** `TransactionHost.tx` outside any `@Transactional()`: the adapter's fallback manager. */
  async viaHost(tag: string): Promise<void> {
    await this.txHost.tx.getRepository(LedgerEntry).insert({ tag, via: 'cls' });
  }

  @Transactional()
  async viaTransactional(tag: string): Promise<void> {
    await this.txHost.tx.insert(LedgerEntry, { tag, via: 'transactional' });
  }

  @Transactional(Propagation.RequiresNew)
  async viaRequiresNew(tag: string): Promise<void> {
    await this.txHost.tx.insert(LedgerEntry, { tag, via: 'requires-new' });
  }
}

@Controller()
class ClsLedgerController {
  constructor(private readonly ledger: ClsLedgerService) {}

  @Post('cls-ledger')
  @Idempotent()
  async write(@Body() body: { tag: string; failFirst?: boolean }) {
    await this.ledger.viaHost(body.tag);
    await this.ledger.viaTransactional(body.tag);
    await this.ledger.viaRequiresNew(body.tag);
    if (body.failFirst && !failedOnce.has(body.tag)) {
      failedOnce.add(body.tag);
      throw new RetryLaterError('the downstream system is down');
    }
    return { tag: body.tag };
  }
}

const url = process.env.DATABASE_URL;
if (!url) throw new Error('DATABASE_URL is required');
const app = await createAtomicApp({
  databaseUrl: url,
  adapter: 'express',
  extra: {
    imports: [clsTransactionalModule()],
    controllers: [ClsLedgerController],
    providers: [ClsLedgerService],
  },
});
await app.listen(Number(process.env.PORT ?? 0), '127.0.0.1');
const address = app.getHttpServer().address() as { port: number };
console.log(`listening on ${address.port}`);
