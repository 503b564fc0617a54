import {
  Body,
  Controller,
  Get,
  NotFoundException,
  Param,
  Post,
  Query,
  BadRequestException,
} from '@nestjs/common';
import { Idempotent } from '../../lib/index.js';
import { Tenant } from '../tenant.js';
import { ChargesService } from './charges.service.js';
import { CreateChargeDto } from './create-charge.dto.js';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

@Controller('charges')
export class ChargesController {
  constructor(private readonly charges: ChargesService) {}

  @Post()
  // The claim commits with the charge's first phase (its row): one commit less per charge.
  @Idempotent({ oneCommit: true })
  create(@Tenant() tenantId: string, @Body() dto: CreateChargeDto) {
    return this.charges.create(tenantId, dto);
  }

  @Get()
  list(@Tenant() tenantId: string, @Query('customer') customer?: string) {
    if (typeof customer !== 'string' || customer.length === 0) {
      throw new BadRequestException('the customer query parameter is required');
    }
    return this.charges.list(tenantId, customer);
  }

  @Get(':id')
  async get(@Tenant() tenantId: string, @Param('id') id: string) {
    const charge = UUID.test(id) ? await this.charges.get(tenantId, id) : null;
    if (!charge) throw new NotFoundException({ error: 'not_found', message: `no charge ${id}` });
    return charge;
  }
}
