import { Body, Controller, HttpCode, NotFoundException, Post } from '@nestjs/common';
import { ProcessedMessages } from '../../lib/index.js';
import { Charge, Refund } from '../charges/charge.entity.js';
import { Tenant } from '../tenant.js';
import { PspEventDto } from './psp-event.dto.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** An at-least-once consumer: each event id applies once, however often it is delivered. */
@Controller('webhooks')
export class WebhooksController {
  constructor(private readonly messages: ProcessedMessages) {}

  @Post('psp')
  @HttpCode(200)
  async receive(@Tenant() tenantId: string, @Body() event: PspEventDto) {
    // Event ids are the PSP's, scoped per tenant: one consumer name per tenant.
    const outcome = await this.messages.processOnce(
      `psp:${tenantId}`,
      event.id,
      async (manager) => {
        const charge = UUID.test(event.charge)
          ? await manager.findOne(Charge, {
              where: { id: event.charge, tenantId },
              lock: { mode: 'pessimistic_write' },
            })
          : null;
        // Throwing rolls the event's record back too: nothing is recorded for it.
        if (!charge) {
          throw new NotFoundException({ error: 'not_found', message: `no charge ${event.charge}` });
        }
        await manager.insert(Refund, {
          tenantId,
          chargeId: charge.id,
          eventId: event.id,
          amount: String(event.amount),
        });
        await manager.increment(Charge, { id: charge.id }, 'amountRefunded', event.amount);
      },
    );
    return { duplicate: outcome.duplicate };
  }
}
