import { Injectable } from '@nestjs/common';
import { Cron } from '@nestjs/schedule';
import { InjectRepository } from '@nestjs/typeorm';
import { currentTick, IdempotentTask } from 'nestjs-idempotency-pg';
import { type Repository } from 'typeorm';
import { Settlement } from './settlement.entity.js';

@Injectable()
export class SettlementTask {
  constructor(@InjectRepository(Settlement) private readonly settlements: Repository<Settlement>) {}

  // Every replica's timer fires; one replica runs each tick, its rows and the tick's record
  // committed together; the others skip it. Every five minutes, unless configured.
  @Cron(process.env.SETTLE_CRON ?? '0 */5 * * * *', { name: 'settle-payouts' })
  @IdempotentTask()
  async settle() {
    // The time this tick stands for (the same on every replica, and on a resumed tick), not
    // the time it happens to run.
    const upTo = currentTick()!.slot;
    await this.settlements.insert({ upTo });
  }
}
