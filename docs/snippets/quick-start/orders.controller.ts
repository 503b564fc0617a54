// src/orders.controller.ts
import { Body, Controller, Headers, Post } from '@nestjs/common';
import { InjectRepository } from '@nestjs/typeorm';
import { Idempotent } from 'nestjs-idempotency-pg';
import { Repository } from 'typeorm';
import { Order } from './order.entity.js';

@Controller('orders')
export class OrdersController {
  constructor(@InjectRepository(Order) private readonly orders: Repository<Order>) {}

  @Post()
  @Idempotent()
  async create(@Headers('x-tenant-id') tenant: string, @Body() body: { amount: number }) {
    // Runs once per key: the insert and the stored 201 commit together; a retry gets the
    // same 201 and body again, without inserting.
    const { id } = await this.orders.save({ tenant, amount: body.amount });
    return { id, amount: body.amount };
  }
}
