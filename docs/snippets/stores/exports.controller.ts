import { Body, Controller, Post } from '@nestjs/common';
import { Idempotent } from 'nestjs-idempotency-pg';

@Controller()
export class ExportsController {
  @Post('search-exports')
  @Idempotent({ claimStore: 'redis', atomic: false })
  createExport(@Body() body: { query: string }) {
    return { query: body.query, status: 'queued' };
  }
}
