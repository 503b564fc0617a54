import { Controller } from '@nestjs/common';
import { EventPattern, Payload } from '@nestjs/microservices';
import { InjectRepository } from '@nestjs/typeorm';
import { IdempotentMessage } from 'nestjs-idempotency-pg';
import { Repository } from 'typeorm';
import { Settlement } from './settlement.entity.js';

@Controller()
export class SettlementsConsumer {
  constructor(@InjectRepository(Settlement) private readonly settlements: Repository<Settlement>) {}

  @EventPattern('settlement.created')
  @IdempotentMessage({ ack: true, maxAttempts: 5 }) // ack: true needs noAck: false (main.ts)
  async settle(@Payload() settlement: { account: string; amount: number }) {
    await this.settlements.insert({ account: settlement.account, amount: settlement.amount });
  }
}
