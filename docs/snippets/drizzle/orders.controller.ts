import { Body, Controller, HttpCode, Inject, Param, ParseIntPipe, Post } from '@nestjs/common';
import { eq } from 'drizzle-orm';
import { Idempotent, PhaseRunner } from 'nestjs-idempotency-pg';
import { type Database, DRIZZLE } from './database.js';
import { OrdersService } from './orders.service.js';
import { orders } from './schema.js';
import { requestShipment } from './warehouse.js';

@Controller('orders')
export class OrdersController {
  constructor(
    private readonly orders: OrdersService,
    private readonly phases: PhaseRunner,
    @Inject(DRIZZLE) private readonly db: Database,
  ) {}

  @Post()
  @Idempotent()
  place(@Body() body: { sku: string; quantity: number }) {
    return this.orders.place(body.sku, body.quantity);
  }

  @Post(':id/ship')
  @Idempotent()
  @HttpCode(200)
  async ship(@Param('id', ParseIntPipe) id: number) {
    // A phase's first argument is TypeORM's EntityManager, not for Drizzle apps: `this.db`
    // joins the phase's transaction, which commits with the phase's recovery point.
    await this.phases.run('reserved', async () => {
      await this.db.update(orders).set({ status: 'reserved' }).where(eq(orders.id, id));
    });
    // The call runs with no transaction open, carrying a key derived from the client's.
    const { trackingNumber } = await this.phases.call(
      'shipped',
      ({ idempotencyKey }) => requestShipment(id, idempotencyKey),
      async (_manager, shipment) => {
        await this.db
          .update(orders)
          .set({ status: 'shipped', trackingNumber: shipment.trackingNumber })
          .where(eq(orders.id, id));
        return shipment;
      },
    );
    return this.phases.finish(async () => ({ id, status: 'shipped', trackingNumber }));
  }
}
