import {
  Body,
  Controller,
  Get,
  Headers,
  HttpCode,
  Inject,
  NotFoundException,
  Param,
  Post,
} from '@nestjs/common';
import { Idempotent } from '../../lib/index.js';
import { CreateOrderDto } from './create-order.dto.js';
import { orderView, OrdersService } from './orders.service.js';
import { readHold } from './test-hold.js';

/** Whether the app honours `X-Test-Hold` (tests only). */
export const TEST_HOOKS = Symbol('TEST_HOOKS');

@Controller('orders')
export class OrdersController {
  constructor(
    private readonly orders: OrdersService,
    @Inject(TEST_HOOKS) private readonly testHooks: boolean,
  ) {}

  @Post()
  @Idempotent()
  create(@Body() dto: CreateOrderDto, @Headers('x-test-hold') hold?: string) {
    return this.orders.place(dto, readHold(this.testHooks, hold));
  }

  @Post(':id/ship')
  @HttpCode(200)
  @Idempotent()
  ship(@Param('id') id: string, @Headers('x-test-hold') hold?: string) {
    return this.orders.ship(id, readHold(this.testHooks, hold));
  }

  @Get(':id')
  async get(@Param('id') id: string) {
    const order = await this.orders.find(id);
    if (!order) throw new NotFoundException(`no order ${id}`);
    return orderView(order);
  }
}
