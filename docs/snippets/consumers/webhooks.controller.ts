import { Body, Controller, HttpCode, Post } from '@nestjs/common';
import { ProcessedMessages } from 'nestjs-idempotency-pg';
import { Refund } from './refund.entity.js';

export interface PspEvent {
  id: string;
  charge: string;
  amount: number;
}

@Controller('webhooks')
export class WebhooksController {
  constructor(private readonly messages: ProcessedMessages) {}

  @Post('psp')
  @HttpCode(200)
  async receive(@Body() event: PspEvent) {
    const outcome = await this.messages.processOnce('psp-webhooks', event.id, async (manager) => {
      await manager.insert(Refund, { chargeId: event.charge, amount: event.amount });
    });
    return { duplicate: outcome.duplicate }; // acknowledge either way
  }
}
