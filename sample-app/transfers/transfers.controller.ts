import { BadRequestException, Body, Controller, Get, Post, Query } from '@nestjs/common';
import { Idempotent } from '../../lib/index.js';
import { Tenant } from '../tenant.js';
import { CreateTransferDto } from './create-transfer.dto.js';
import { TransfersService } from './transfers.service.js';

/** A plain handler: one service call, exactly once through `@Idempotent()` alone. */
@Controller('transfers')
export class TransfersController {
  constructor(private readonly transfers: TransfersService) {}

  @Post()
  @Idempotent()
  create(@Tenant() tenantId: string, @Body() dto: CreateTransferDto) {
    return this.transfers.create(tenantId, dto);
  }

  @Get()
  list(@Tenant() tenantId: string, @Query('from') from?: string) {
    if (typeof from !== 'string' || from.length === 0) {
      throw new BadRequestException('the from query parameter is required');
    }
    return this.transfers.list(tenantId, from);
  }
}
