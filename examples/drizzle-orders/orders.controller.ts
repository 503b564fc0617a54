import { Body, Controller, Get, HttpCode, Inject, Param, ParseIntPipe, Post } from '@nestjs/common';
import { Idempotent, PhaseRunner } from '../../lib/index.js';
import { CreateOrderDto } from './create-order.dto.js';
import { OrdersService } from './orders.service.js';
import { testPause } from './test-pause.js';
import { requestShipment, WAREHOUSE_URL } from './warehouse.client.js';

@Controller('orders')
export class OrdersController {
  constructor(
    private readonly orders: OrdersService,
    private readonly phases: PhaseRunner,
    @Inject(WAREHOUSE_URL) private readonly warehouseUrl: string,
  ) {}

  /** One transaction: the order, its 'placed' event and the stored 201 commit together. */
  @Post()
  @Idempotent()
  async place(@Body() dto: CreateOrderDto) {
    const order = await this.orders.place(dto);
    await testPause('after-writes');
    return order;
  }

  /**
   * Atomic phases around the warehouse call: 'reserved' commits with its recovery point; the
   * call runs with no transaction open and the phase's derived key; its tracking number is
   * recorded with the 'shipped' point. A takeover after a crash resumes after the last one.
   */
  @Post(':id/ship')
  @Idempotent()
  @HttpCode(200)
  async ship(@Param('id', ParseIntPipe) id: number) {
    // The phases' first argument is TypeORM's EntityManager: Drizzle does not need it.
    await this.phases.run('reserved', () => this.orders.reserve(id));
    await testPause('after-reserved');
    const { trackingNumber } = await this.phases.call(
      'shipped',
      ({ idempotencyKey }) => requestShipment(this.warehouseUrl, id, idempotencyKey),
      async (_manager, shipment) => {
        await this.orders.ship(id, shipment.trackingNumber);
        return shipment;
      },
    );
    return this.phases.finish(async () => ({ id, status: 'shipped', trackingNumber }));
  }

  @Get(':id')
  async get(@Param('id', ParseIntPipe) id: number) {
    const { sku, quantity, status, trackingNumber } = await this.orders.get(id);
    return { id, sku, quantity, status, trackingNumber };
  }
}
