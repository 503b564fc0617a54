import { Body, Controller, Post } from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency-pg';
import { ChargesService, type CreateChargeDto } from './charges.service.js';

@Controller('charges')
export class ChargesController {
  constructor(private readonly charges: ChargesService) {}

  @Post()
  @Idempotent()
  create(@Body() dto: CreateChargeDto) {
    return this.charges.create(dto);
  }
}
