import { Body, Controller, Post } from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency-pg';
import { type CreateTransferDto, TransfersService } from './transfers.service.js';

@Controller('transfers')
export class TransfersController {
  constructor(private readonly transfers: TransfersService) {}

  @Post()
  // Local work only (its writes go to this PostgreSQL): the claim commits with them.
  @Idempotent({ oneCommit: true })
  create(@Body() dto: CreateTransferDto) {
    return this.transfers.create(dto);
  }
}
