import { Body, Controller, HttpCode, Param, ParseIntPipe, Post } from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency-pg';
import { OrdersService } from './orders.service.js';
import { ShippingService } from './shipping.service.js';

@Controller('orders')
export class OrdersController {
  constructor(
    private readonly orders: OrdersService,
    private readonly shipping: ShippingService,
  ) {}

  @Post()
  @Idempotent()
  place(@Body() body: { sku: string; quantity: number }) {
    return this.orders.place(body.sku, body.quantity);
  }

  @Post(':id/ship')
  @Idempotent()
  @HttpCode(200)
  ship(@Param('id', ParseIntPipe) id: number) {
    return this.shipping.ship(BigInt(id));
  }
}
