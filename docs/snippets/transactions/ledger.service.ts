import { Injectable } from '@nestjs/common';
import { Transactional, TransactionHost } from '@nestjs-cls/transactional';
import { type TransactionalAdapterTypeOrm } from '@nestjs-cls/transactional-adapter-typeorm';

@Injectable()
export class LedgerService {
  constructor(private readonly txHost: TransactionHost<TransactionalAdapterTypeOrm>) {}

  // On an @Idempotent() route this is a savepoint of the request's transaction: it commits
  // with the stored answer, or not at all.
  @Transactional()
  async post(account: string, amount: number): Promise<void> {
    await this.txHost.tx.query('INSERT INTO ledger (account, amount) VALUES ($1, $2)', [
      account,
      amount,
    ]);
  }
}
