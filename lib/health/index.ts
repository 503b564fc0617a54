/**
 * `nestjs-idempotency-pg/terminus`: the store's health indicator for `@nestjs/terminus` (an
 * optional peer dependency, needed only by apps that import this entry point).
 */
export {
  IdempotencyHealthIndicator,
  type IdempotencyHealthOptions,
} from './idempotency.health-indicator.js';
