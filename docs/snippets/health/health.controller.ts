import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService } from '@nestjs/terminus';
import { IdempotencyHealthIndicator } from 'nestjs-idempotency-pg/terminus';

// In a module with `imports: [TerminusModule]` and `providers: [IdempotencyHealthIndicator]`.
@Controller('health')
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly idempotency: IdempotencyHealthIndicator,
  ) {}

  @Get()
  @HealthCheck()
  check() {
    return this.health.check([
      () => this.idempotency.isHealthy('idempotency', { maxUnfinishedAgeMs: 600_000 }),
    ]);
  }
}
