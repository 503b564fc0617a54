import { Body, Controller, Post } from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency-pg';
import { type CreateOrderDto, OrdersService } from './orders.service.js';

@Controller('orders')
export class OrdersController {
  constructor(private readonly orders: OrdersService) {}

  @Post()
  @Idempotent()
  create(@Body() dto: CreateOrderDto) {
    return this.orders.place(dto);
  }
}
