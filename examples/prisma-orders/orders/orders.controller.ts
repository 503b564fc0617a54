import {
  Body,
  Controller,
  Get,
  Headers,
  HttpCode,
  Inject,
  Param,
  ParseIntPipe,
  Post,
} from '@nestjs/common';
import { Idempotent } from '../../../lib/index.js';
import { CreateOrderDto } from './create-order.dto.js';
import { OrdersService } from './orders.service.js';
import { readTestHooks, TEST_HOOKS } from './test-hooks.js';

@Controller('orders')
export class OrdersController {
  constructor(
    private readonly orders: OrdersService,
    @Inject(TEST_HOOKS) private readonly testHooks: boolean,
  ) {}

  @Post()
  @Idempotent()
  place(@Body() dto: CreateOrderDto, @Headers() headers: Record<string, string>) {
    return this.orders.place(dto, readTestHooks(this.testHooks, headers));
  }

  @Post(':id/ship')
  @Idempotent()
  @HttpCode(200)
  ship(@Param('id', ParseIntPipe) id: number) {
    return this.orders.ship(BigInt(id));
  }

  @Get(':id')
  find(@Param('id', ParseIntPipe) id: number) {
    return this.orders.find(BigInt(id));
  }
}
